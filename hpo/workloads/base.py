"""The workload protocol: what a built-in or user workload gives the executor.

A workload owns its model, data and metrics; the executor owns every systems knob. The executor
calls, in order:

    workload = factory(options)                # options: the workload's `Options` dataclass
    model = workload.build_model(attention)    # attention: an hpo attention backend name
    blocks = workload.checkpoint_blocks(model) # modules wrapped for gradient checkpointing
    for batch in workload.train_batches(batch_size, seed): loss = workload.training_loss(model, batch)
    metrics = workload.evaluate(model, move)   # under inference_mode and the trial's autocast

Batches are dicts of CPU tensors; `move(batch)` puts one on the trial's device. `evaluate` returns
every metric named in `metrics`. A model that uses attention calls
`hpo.knobs.attention.attention_function(name)` (or maps the name onto a library's own switch), so
the attention knob changes the kernel that runs.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, ClassVar

import torch
from torch import nn

# Re-exported: user workloads import their options base from here.
from hpo.workloads.options import WorkloadOptions, build_options

Batch = dict[str, torch.Tensor]
MoveFn = Callable[[Batch], Batch]

__all__ = ["Batch", "MoveFn", "Workload", "WorkloadOptions", "build_options"]


class Workload(ABC):
    """Base class for workloads. Subclasses set `Options` and `metrics`."""

    Options: ClassVar[type[WorkloadOptions]] = WorkloadOptions
    # The metrics `evaluate` returns, each with its direction: {"val_loss": "minimize"}. The older
    # tuple form ("val_loss",) names them, but a study may then neither optimize nor target them.
    metrics: ClassVar[Mapping[str, str] | tuple[str, ...]] = ()
    # The loop that trains it: "hpo" (hpo's own) or "lightning" (hpo.workloads.lightning).
    trainer: ClassVar[str] = "hpo"
    # Whether `build_model` or `training_loss` read `self.hparams` (the learning rate...). A
    # workload that says no lets the probe reuse the reference's compared step across trials that
    # differ only in those (`hpo.verify.compared`); the safe default is yes.
    model_reads_hparams: ClassVar[bool] = True

    def __init__(self, options: WorkloadOptions):
        self.options = options
        self.hparams: dict[str, Any] = {}

    def bind_training(self, hparams: Mapping[str, Any]) -> None:
        """Called with the trial's training hyperparameters before any model is built; a workload
        whose model needs them (a LightningModule builds its own optimizer) reads `self.hparams`."""
        self.hparams = dict(hparams)

    @abstractmethod
    def build_model(self, attention: str) -> nn.Module: ...

    def checkpoint_blocks(self, model: nn.Module) -> Sequence[nn.Module]:
        """The repeated blocks to recompute in backward; none by default."""
        return ()

    @abstractmethod
    def train_batches(self, batch_size: int, seed: int) -> Iterator[Batch]: ...

    @abstractmethod
    def training_loss(self, model: nn.Module, batch: Batch) -> torch.Tensor: ...

    @abstractmethod
    def evaluate(self, model: nn.Module, move: MoveFn) -> dict[str, float]: ...

    def samples_in(self, batch: Batch) -> int:
        return len(next(iter(batch.values())))
