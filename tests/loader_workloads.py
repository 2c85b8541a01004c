"""Workloads that hand hpo a dataset instead of batches (`Workload.train_dataset`), for the loader
tests: `DatasetToy` (a map-style dataset whose samples are a function of (seed, index)), and ones
whose workers fail or misbehave on purpose."""

from __future__ import annotations

import threading

import torch
from torch.utils.data import Dataset, IterableDataset, get_worker_info

from toy_workloads import Toy


class TokenSamples(Dataset):
    """`size` samples of Toy's task; sample i is drawn from a generator seeded with (seed, i)."""

    def __init__(self, seed: int, size: int, seq_len: int, vocab: int):
        self.seed, self.size, self.seq_len, self.vocab = seed, size, seq_len, vocab

    def __len__(self) -> int:
        return self.size

    def __getitem__(self, index: int) -> dict[str, torch.Tensor]:
        generator = torch.Generator().manual_seed(self.seed * 1_000_003 + index)
        tokens = torch.randint(0, self.vocab, (self.seq_len,), generator=generator)
        return {"tokens": tokens, "labels": (tokens[0] > tokens[-1]).long()}


class DatasetToy(Toy):
    """Toy's model and task, its training samples given as a dataset."""

    samples = 96

    def train_dataset(self, seed: int) -> Dataset:
        return TokenSamples(seed, self.samples, self.options.seq_len, self.options.vocab)


class LockedSamples(TokenSamples):
    """Holds a lock: it cannot be pickled to a spawned worker."""

    def __init__(self, *args):
        super().__init__(*args)
        self.lock = threading.Lock()


class UnpicklableToy(DatasetToy):
    def train_dataset(self, seed: int) -> Dataset:
        return LockedSamples(seed, self.samples, self.options.seq_len, self.options.vocab)


class ShardedBySample(IterableDataset):
    """An iterable dataset sharded the common way, one sample at a time across workers: each worker
    then makes whole batches of its own samples, which reorders them against num_workers=0."""

    def __init__(self, samples: TokenSamples):
        self.samples = samples

    def __iter__(self):
        info = get_worker_info()
        worker, workers = (info.id, info.num_workers) if info else (0, 1)
        for index in range(worker, len(self.samples), workers):
            yield self.samples[index]


class ShardedBySampleToy(DatasetToy):
    def train_dataset(self, seed: int) -> Dataset:
        return ShardedBySample(TokenSamples(seed, self.samples, self.options.seq_len, self.options.vocab))


class OneBatchToy(DatasetToy):
    """One batch of 8 samples an epoch: the loader check's batches reach into later epochs."""

    samples = 8
