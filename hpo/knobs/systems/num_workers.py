"""`systems.num_workers`: DataLoader worker processes (0: batches are made in the trial's process).
On a CPU the workers and torch's threads share the trial's cores (`hpo.engine._loader.core_split`)."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

from hpo.knobs.knob import LoaderKnob

__all__ = ["KNOB"]


class NumWorkers(LoaderKnob):
    name = "num_workers"
    help = "DataLoader worker processes; 0: batches are made in the trial's own process"
    position = 120
    default = 0
    reference = 0
    values_text = "an integer from 0 to 64"
    value_type = int
    schema = Annotated[int, Field(ge=0, le=64)]
    hf_argument = "dataloader_num_workers"


KNOB = NumWorkers()
