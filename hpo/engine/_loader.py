"""A trial's input pipeline: the DataLoader built from the searched settings (`systems.loader`,
`num_workers`, `pin_memory`, `prefetch_factor`, `persistent_workers`), or the refusal that says why
those settings cannot apply to this workload or device.

Refused, as an `incompatible` verdict before the probe runs (never silently ignored): any setting
other than the default on a workload that hands hpo batches instead of a dataset (hpo builds no
loader there), or on a Lightning workload (its own loaders); `prefetch_factor` or
`persistent_workers` without workers (torch has neither in the main process); `loader: dali` on
anything but CUDA, without the package (the machine check refuses both before the first trial), on
a workload without a dataset, or with a loader knob other than `num_workers`
(`hpo.engine._dali_loader` builds the pipeline).

Workers start by `spawn`: a trial process forked from a parent that ran torch must not fork again
(its OpenMP pool hangs the child), and spawning pickles the dataset, so a dataset that cannot reach
a worker is found here, where the loader check refuses it (`hpo.engine._loader_stream`).

On CPU the workers and torch's intra-op threads share the trial's cores: compute gets the cores
less one per worker (at least one), and the split is recorded."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from dataclasses import dataclass

import torch
from torch.utils.data import Dataset, IterableDataset

from hpo import deps
from hpo.config.trial import LoaderSettings
from hpo.errors import KnobUnavailable
from hpo.hardware import torch_threads
from hpo.knobs.registry import LOADER_KNOBS
from hpo.workloads.base import Workload
from hpo.workloads.dataset_batches import seeded_loader

__all__ = ["CoreSplit", "Indexed", "Tagged", "check_settings", "core_split", "trial_loader"]


def check_settings(workload: Workload, settings: LoaderSettings, device: torch.device) -> None:
    """Raise KnobUnavailable when `settings` cannot apply to `workload` on `device`."""
    if settings.loader == "dali":
        _check_dali(workload, settings, device)
        return
    changed = settings.changed()
    if changed and (workload.trainer != "hpo" or not workload.gives_dataset()):
        _refuse_without_loader(workload, *next(iter(changed.items())))
    for knob, value in changed.items():
        if LOADER_KNOBS[knob].needs_workers and settings.num_workers == 0:
            raise KnobUnavailable(
                f"{knob}={value} needs loader workers, got num_workers=0; search it with num_workers > 0",
                [(knob, value), ("num_workers", 0)],
            )


def _refuse_without_loader(workload: Workload, knob: str, value: object) -> None:
    """A loader knob set on a workload hpo builds no loader for (Lightning's, or one that hands
    batches): refused, never ignored."""
    how = (
        "trains with Lightning's own loaders" if workload.trainer != "hpo" else "hands hpo batches (train_batches), not a dataset"
    )
    raise KnobUnavailable(
        f"{knob}={value}: workload {type(workload).__name__} {how}, so hpo builds no loader to apply it to; "
        f"leave systems.{knob} out, or give the workload train_dataset(seed)",
        [(knob, value)],
    )


def _check_dali(workload: Workload, settings: LoaderSettings, device: torch.device) -> None:
    """`loader: dali` needs the package, a CUDA device and a workload that gives a dataset; of the
    loader knobs only `num_workers` applies (DALI's Python workers, persistent, its own prefetch and
    pinned staging)."""
    deps.require("nvidia_dali")
    if device.type != "cuda":
        raise KnobUnavailable(f"loader=dali needs a CUDA device, the trial runs on {device.type}", [("loader", "dali")])
    if workload.trainer != "hpo" or not workload.gives_dataset():
        raise KnobUnavailable(
            f"loader=dali: workload {type(workload).__name__} gives no dataset (train_dataset) for DALI to read; "
            "use loader=torch",
            [("loader", "dali")],
        )
    for knob, value in settings.changed().items():
        if knob not in ("loader", "num_workers"):
            raise KnobUnavailable(
                f"{knob}={value} is torch DataLoader's; loader=dali takes num_workers only (its workers persist, "
                f"it prefetches and pins by itself): leave systems.{knob} out with loader=dali",
                [(knob, value), ("loader", "dali")],
            )


class Indexed(Dataset):
    """A map-style dataset whose samples come with the index they were made from, in the process
    that made them: which samples a batch holds, whatever random augmentation they got there."""

    def __init__(self, dataset: Dataset):
        self.dataset = dataset

    def __len__(self) -> int:
        return len(self.dataset)

    def __getitem__(self, index: int) -> tuple[int, object]:
        return index, self.dataset[index]

    def __getitems__(self, indices: list[int]) -> list[tuple[int, object]]:
        batched = getattr(self.dataset, "__getitems__", None)  # a dataset's own batched fetch is kept
        samples = batched(indices) if batched else [self.dataset[i] for i in indices]
        return list(zip(indices, samples, strict=True))


class Tagged:
    """The workload's collate, returning (batch, pid of the process that made it, the samples'
    indices or None for an iterable dataset): the evidence of which workers delivered which
    samples. A class, not a closure, so that it pickles to spawned workers."""

    def __init__(self, collate, indexed: bool):
        self.collate, self.indexed = collate, indexed

    def __call__(self, samples: list):
        if not self.indexed:
            return self.collate(samples), os.getpid(), None
        return self.collate([s for _, s in samples]), os.getpid(), tuple(int(i) for i, _ in samples)


def trial_loader(workload: Workload, settings: LoaderSettings, batch_size: int, seed: int, *, reference: bool = False):
    """The DataLoader of the workload's dataset with `settings` (`reference`: the same without
    workers or pinning, the order every setting must reproduce), its batches tagged by `Tagged`."""
    dataset = workload.train_dataset(seed)
    indexed = not isinstance(dataset, IterableDataset)
    kwargs: dict = {}
    if not reference and settings.num_workers > 0:
        kwargs = {
            "num_workers": settings.num_workers,
            "persistent_workers": settings.persistent_workers,
            "multiprocessing_context": "spawn",
        }
        if settings.prefetch_factor is not None:
            kwargs["prefetch_factor"] = settings.prefetch_factor
    # torch pins only where an accelerator exists; elsewhere it warns and does nothing, so it is not asked.
    if not reference and settings.pin_memory and torch.cuda.is_available():
        kwargs["pin_memory"] = True
    source = Indexed(dataset) if indexed else dataset
    return seeded_loader(source, Tagged(workload.collate_function(), indexed), batch_size, seed, **kwargs)


@dataclass(frozen=True)
class CoreSplit:
    """How a CPU trial's cores were shared: loader workers and torch's intra-op threads."""

    cores: int
    workers: int
    compute_threads: int

    def as_dict(self) -> dict[str, int]:
        return {"cores": self.cores, "workers": self.workers, "compute_threads": self.compute_threads}


@contextlib.contextmanager
def core_split(settings: LoaderSettings, device: torch.device) -> Iterator[CoreSplit | None]:
    """On CPU with workers: torch's threads set to the trial's cores less one per worker, restored
    after; None elsewhere (a GPU computes on its own cores, and no worker means nothing to share)."""
    if device.type != "cpu" or settings.num_workers == 0:
        yield None
        return
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    split = CoreSplit(cores, settings.num_workers, max(1, cores - settings.num_workers))
    with torch_threads(split.compute_threads):
        yield split
