"""Tune a LightningModule with hpo: subclass `LightningWorkload`, name it in the search-space file.

    class MyWorkload(LightningWorkload):
        Options = MyOptions                     # a WorkloadOptions dataclass: the workload's options
        metrics = {"val_loss": "minimize"}      # what the module logs in validation_step, and which way is better

        def build_module(self, attention, hparams):   # attention: hpo's attention function
            return MyModule(self.options, attention, lr=hparams["lr"])

        def build_loaders(self, batch_size, seed):    # (train DataLoader, validation DataLoader)
            return make_loaders(batch_size, seed)

        def checkpoint_blocks(self, module):          # blocks recomputed when grad_checkpointing is on
            return list(module.blocks)

Trials of such a workload train through Lightning's own Trainer, with the knobs mapped onto
Lightning's mechanisms (its precision plugins, the module's own optimizer rebuilt with the trial's
implementation, torch.compile of the module). The pre-trial probe drives the same module through
hpo's step (`training_step` gives the loss), so a Lightning trial is verified like any other.
This module does not import Lightning; hpo's Lightning loop does, only for Lightning trials.
"""

from __future__ import annotations

import warnings
import weakref
from abc import abstractmethod
from collections.abc import Iterator, Mapping, Sequence
from typing import Any, ClassVar

import torch
from torch import nn
from torch.utils.data import DataLoader

from hpo.knobs.attention_kernels import AttentionFn, attention_function
from hpo.torch_compat import is_compiled_wrapper
from hpo.workloads.base import Batch, MoveFn, Workload

__all__ = ["LightningWorkload"]

# A tuple batch (x, y) travels through hpo's probe as {"_0": x, "_1": y}, and back.
_TUPLE_PREFIX = "_"


def as_dict(batch: Any) -> Batch:
    if isinstance(batch, Mapping):
        return dict(batch)
    return {f"{_TUPLE_PREFIX}{i}": t for i, t in enumerate(batch)}


def _as_lightning(batch: Batch) -> Any:
    if batch and all(k.startswith(_TUPLE_PREFIX) and k[1:].isdigit() for k in batch):
        return tuple(batch[f"{_TUPLE_PREFIX}{i}"] for i in range(len(batch)))
    return batch


def step_loss(output: Any) -> torch.Tensor:
    """The loss from what `training_step` returned: a tensor or a dict with "loss"."""
    return output["loss"] if isinstance(output, Mapping) else output


class LightningWorkload(Workload):
    """Base class for a workload built from a LightningModule and its data loaders."""

    trainer: ClassVar[str] = "lightning"

    @abstractmethod
    def build_module(self, attention: AttentionFn, hparams: dict[str, Any]) -> nn.Module:
        """The LightningModule for this trial; use `attention` for its attention layers."""

    @abstractmethod
    def build_loaders(self, batch_size: int, seed: int) -> tuple[DataLoader, DataLoader]:
        """(training loader, validation loader); the training loader shuffles with `seed`."""

    def checkpoint_blocks(self, model: nn.Module) -> Sequence[nn.Module]:
        return ()

    # hpo's Workload protocol, used by the pre-trial probe.
    def build_model(self, attention: str) -> nn.Module:
        return self.build_module(attention_function(attention), self.hparams)

    def train_batches(self, batch_size: int, seed: int) -> Iterator[Batch]:
        loader = self.build_loaders(batch_size, seed)[0]
        while True:
            for batch in loader:
                yield as_dict(batch)

    def training_loss(self, model: nn.Module, batch: Batch) -> torch.Tensor:
        with warnings.catch_warnings():
            # Outside a Trainer, self.log() in training_step only warns; the probe needs the loss.
            warnings.filterwarnings("ignore", message=".*self.log.*")
            return step_loss(_as_trained(model).training_step(_as_lightning(batch), 0))

    def evaluate(self, model: nn.Module, move: MoveFn) -> dict[str, float]:
        raise TypeError("a LightningWorkload is evaluated by Lightning's Trainer (validation_step), not by hpo's loop")


def _as_trained(model: nn.Module) -> nn.Module:
    """The module whose `training_step` runs as Lightning's Trainer runs it. torch.compile's wrapper
    compiles `forward` only, and a LightningModule's `training_step`, reached through the wrapper,
    is the module's own and calls its uncompiled forward: the probe would see no compiled graph
    where training runs one. The Trainer turns the wrapper into the module with its steps compiled
    (Lightning's `from_compiled`); so does this, once per wrapper."""
    if not is_compiled_wrapper(model):
        return model
    trained = _TRAINED.get(model)
    if trained is None:
        from lightning.pytorch.utilities.compile import from_compiled

        trained = _TRAINED[model] = from_compiled(model)
    return trained


# Compiled wrapper -> its LightningModule with compiled steps; weak, so a dropped model is freed.
_TRAINED: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
