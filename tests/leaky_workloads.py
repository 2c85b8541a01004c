"""The toy workload whose loss raises, once, an error that quotes the study's storage URL
(`$HPO_STORAGE`), as a user's code that reads it might: `leaky_workloads:Leaky`. `once` is the file
that marks the error as raised, so the trial's retry trains. For `tests/cli/test_no_secret_in_output.py`."""

from __future__ import annotations

import os
from dataclasses import dataclass

from toy_workloads import Toy, ToyOptions


@dataclass(frozen=True, kw_only=True)
class LeakyOptions(ToyOptions):
    once: str = ""


class Leaky(Toy):
    Options = LeakyOptions

    def training_loss(self, model, batch):
        if self.options.once and not os.path.exists(self.options.once):
            open(self.options.once, "w").close()
            raise ConnectionError(f"the feature store beside {os.environ.get('HPO_STORAGE')} went away")
        return super().training_loss(model, batch)
