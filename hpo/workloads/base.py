"""The workload protocol: what a built-in or user workload gives the executor.

A workload owns its model, data and metrics; the executor owns every systems knob. The executor
calls, in order:

    workload = factory(options)                # options: the workload's `Options` dataclass
    model = workload.build_model(attention)    # attention: an hpo attention backend name
    blocks = workload.checkpoint_blocks(model) # modules wrapped for gradient checkpointing
    for batch in workload.train_batches(batch_size, seed): loss = workload.training_loss(model, batch)
    metrics = workload.evaluate(model, move)   # under no_grad and the trial's autocast

Batches are dicts of CPU tensors; `move(batch)` puts one on the trial's device. `evaluate` returns
every metric named in `metrics`. A model that uses attention calls
`hpo.knobs.attention.attention_function(name)` (or maps the name onto a library's own switch), so
the attention knob changes the kernel that runs.
"""

from __future__ import annotations

import dataclasses
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, ClassVar

import torch
from torch import nn

from hpo.errors import UserInputError

Batch = dict[str, torch.Tensor]
MoveFn = Callable[[Batch], Batch]


@dataclasses.dataclass(frozen=True, kw_only=True)
class WorkloadOptions:
    """Base for a workload's options; subclasses add fields with defaults."""

    seed: int = 0


class Workload(ABC):
    """Base class for workloads. Subclasses set `Options` and `metrics`."""

    Options: ClassVar[type[WorkloadOptions]] = WorkloadOptions
    metrics: ClassVar[tuple[str, ...]] = ()

    def __init__(self, options: WorkloadOptions):
        self.options = options

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


def build_options(options_cls: type[WorkloadOptions], raw: Mapping[str, Any], where: str) -> WorkloadOptions:
    """Construct `options_cls` from user keys, naming unknown keys and bad values."""
    known = {f.name for f in dataclasses.fields(options_cls)}
    unknown = sorted(set(raw) - known)
    if unknown:
        raise UserInputError(
            f"{where}.{unknown[0]}: unknown option for this workload; known options: {sorted(known)}"
        )
    try:
        return options_cls(**raw)
    except (TypeError, ValueError) as exc:
        raise UserInputError(f"{where}: {exc}") from None
