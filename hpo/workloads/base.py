"""The workload protocol: what a built-in or user workload gives the executor.

A workload owns its model, data and metrics; the executor owns every systems knob. The executor
calls, in order:

    workload = factory(options)                # options: the workload's `Options` dataclass
    model = workload.build_model(attention)    # attention: an hpo attention backend name
    blocks = workload.checkpoint_blocks(model) # modules wrapped for gradient checkpointing
    for batch in workload.train_batches(batch_size, seed): loss = workload.training_loss(model, batch)
    metrics = workload.evaluate(model, move)   # under inference_mode and the trial's autocast

A workload gives its training data either as batches (`train_batches`) or as a torch `Dataset`
(`train_dataset(seed)`, plus `collate` to turn samples into a batch): then hpo builds the
DataLoader itself, with the searched `systems.num_workers`, `pin_memory`, `prefetch_factor` and
`persistent_workers` (`hpo.engine._loader`), and `train_batches` is the same order without workers.
Batches are dicts of CPU tensors; `move(batch)` puts one on the trial's device. `evaluate` returns
every metric named in `metrics`. A model that uses attention calls
`hpo.knobs.attention_kernels.attention_function(name)` (or maps the name onto a library's own switch), so
the attention knob changes the kernel that runs.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, ClassVar

import torch
from torch import nn
from torch.utils.data import Dataset, default_collate

# Re-exported: user workloads import their options base from here.
from hpo.workloads.dataset_batches import epochs, seeded_loader
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
    # differ only in those (`hpo.verify.probing._kept_reference`); the safe default is yes.
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

    def train_dataset(self, seed: int) -> Dataset | None:
        """The training samples as a map-style or iterable Dataset, for hpo to load with the searched
        loader settings; None (the default): the workload gives batches through `train_batches`. A
        map-style dataset's random augmentation should be a function of (seed, index), so that the
        batches do not depend on which worker made them."""
        return None

    @classmethod
    def gives_dataset(cls) -> bool:
        """Whether the workload gives a dataset (`train_dataset`) for hpo to load: its loader settings apply."""
        return cls.train_dataset is not Workload.train_dataset

    def collate(self, samples: list) -> Batch:
        """A batch from a list of the dataset's samples; torch's default_collate by default. Runs in
        the loader's worker processes: an override makes the workload itself travel to them."""
        return default_collate(samples)

    def collate_function(self) -> Callable[[list], Batch]:
        """What the DataLoader calls: torch's own default_collate unless `collate` is overridden, so
        that a workload which does not override it never has to be picklable."""
        return default_collate if type(self).collate is Workload.collate else self.collate

    def train_batches(self, batch_size: int, seed: int) -> Iterator[Batch]:
        """Training batches, endlessly; by default the dataset's, loaded in this process."""
        dataset = self.train_dataset(seed)
        if dataset is None:
            raise TypeError(
                f"{type(self).__name__} must define train_batches(batch_size, seed) or train_dataset(seed), but defines neither"
            )
        return epochs(seeded_loader(dataset, self.collate_function(), batch_size, seed))

    @abstractmethod
    def training_loss(self, model: nn.Module, batch: Batch) -> torch.Tensor: ...

    @abstractmethod
    def evaluate(self, model: nn.Module, move: MoveFn) -> dict[str, float]: ...

    def samples_in(self, batch: Batch) -> int:
        return len(next(iter(batch.values())))
