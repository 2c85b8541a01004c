"""Batches from a workload's dataset (`Workload.train_dataset`), in an order that is a function of
the seed alone: the one seeded DataLoader both the workload's own `train_batches` (no workers, the
order the probe and the loader check compare with) and hpo's trial loader (`hpo.engine._loader`,
with the searched workers) build.

The shuffle and the workers' base seed both come from one `torch.Generator` seeded with the trial's
seed; a worker seeds `random` and numpy from its own torch seed (base seed + worker id). A map-style
dataset whose random augmentation is a function of (seed, index) then yields the same batches with
any number of workers. An iterable dataset is not shuffled; with workers it must shard by whole
batches (worker w yields the samples of batches w, w + W, ...) or the loader check finds it reorders.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterator
from typing import Any

import torch
from torch.utils.data import DataLoader, Dataset, IterableDataset, RandomSampler

__all__ = ["epochs", "seeded_loader", "seed_worker"]


def seed_worker(worker_id: int) -> None:
    """A worker's `random` and numpy seeds, from the torch seed the DataLoader gave it."""
    seed = torch.initial_seed() % 2**32
    random.seed(seed)
    try:
        import numpy
    except ImportError:  # numpy is optional to torch; nothing to seed without it
        return
    numpy.random.seed(seed)


def seeded_loader(dataset: Dataset, collate: Callable, batch_size: int, seed: int, **settings: Any) -> DataLoader:
    """The DataLoader of `dataset` whose order depends on `seed` only; `settings` are DataLoader's own
    (num_workers, pin_memory, prefetch_factor, persistent_workers, multiprocessing_context)."""
    iterable = isinstance(dataset, IterableDataset)
    # The shuffle draws from a generator of its own. Were it the loader's, whose each new epoch
    # iterator also draws the workers' base seed from it, persistent workers (one iterator for
    # every epoch, one base seed) would shuffle epoch 2 on differently from no workers.
    sampler = None if iterable else RandomSampler(dataset, generator=torch.Generator().manual_seed(seed))
    return DataLoader(
        dataset,
        batch_size=batch_size,
        sampler=sampler,
        drop_last=not iterable,  # every step sees batch_size samples
        collate_fn=collate,
        generator=torch.Generator().manual_seed(seed),
        worker_init_fn=seed_worker,
        **settings,
    )


def epochs(loader: DataLoader) -> Iterator:
    """The loader's batches, epoch after epoch (the trainer stops it by its step count)."""
    while True:
        empty = True
        for batch in loader:
            empty = False
            yield batch
        if empty:
            size = len(loader.dataset) if hasattr(loader.dataset, "__len__") else "fewer"
            raise ValueError(
                f"the workload's dataset yields no full batch of {loader.batch_size} samples (it has {size}; a partial "
                "batch is dropped): lower params.batch_size or give the workload more samples"
            )
