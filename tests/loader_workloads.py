"""Workloads that hand hpo a dataset instead of batches (`Workload.train_dataset`), for the loader
tests: `DatasetToy` (a map-style dataset whose samples are a function of (seed, index)), and ones
whose workers fail or misbehave on purpose."""

from __future__ import annotations

import os
import threading
import time

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


class FlippedSamples(TokenSamples):
    """Augmented the torchvision way: a random flip drawn from torch's global RNG, which torch seeds
    differently in each worker, so a sample's tokens depend on which process made it."""

    def __getitem__(self, index: int) -> dict[str, torch.Tensor]:
        sample = super().__getitem__(index)
        if torch.rand(()) < 0.5:
            sample["tokens"] = sample["tokens"].flip(0)
        return sample


class GlobalRngAugmentedToy(DatasetToy):
    def train_dataset(self, seed: int) -> Dataset:
        return FlippedSamples(seed, self.samples, self.options.seq_len, self.options.vocab)


class SleepingSamples(TokenSamples):
    """Each sample takes `delay_s` to make: a loader whose wait is known (the data-wait tests).
    `spent` gets each sample's real time in order (a sleep overshoots on a busy machine)."""

    delay_s = 0.025
    spent: list[float] = []

    def __getitem__(self, index: int) -> dict[str, torch.Tensor]:
        start = time.perf_counter()
        time.sleep(self.delay_s)
        sample = super().__getitem__(index)
        self.spent.append(time.perf_counter() - start)
        return sample


class SlowSamplesToy(DatasetToy):
    def train_dataset(self, seed: int) -> Dataset:
        return SleepingSamples(seed, self.samples, self.options.seq_len, self.options.vocab)


class EveryWorkerAll(IterableDataset):
    """An iterable dataset that forgets to shard: every worker yields every sample, so with two
    workers each batch comes twice."""

    def __init__(self, samples: TokenSamples):
        self.samples = samples

    def __iter__(self):
        for index in range(len(self.samples)):
            yield self.samples[index]


class UnshardedToy(DatasetToy):
    def train_dataset(self, seed: int) -> Dataset:
        return EveryWorkerAll(TokenSamples(seed, self.samples, self.options.seq_len, self.options.vocab))


class WorkerZeroLate(TokenSamples):
    """Worker 0 makes its first sample only after worker 1 has made a whole batch (a file in
    `flags` says so): a loader that hands batches over as they come (`in_order=False`) then delivers
    worker 1's batch first."""

    def __init__(self, flags: str, batch_size: int, *args):
        super().__init__(*args)
        self.flags, self.batch_size, self.made = flags, batch_size, 0

    def __getitem__(self, index: int) -> dict[str, torch.Tensor]:
        info = get_worker_info()
        flag = os.path.join(self.flags, "worker-1-made-a-batch")
        if info is not None and info.id == 0 and self.made == 0:
            deadline = time.monotonic() + 60
            while not os.path.exists(flag) and time.monotonic() < deadline:
                time.sleep(0.01)
            time.sleep(0.5)  # worker 1's batch is collated and on its way
        self.made += 1
        if info is not None and info.id == 1 and self.made == self.batch_size:
            open(flag, "w").close()
        return super().__getitem__(index)


class WorkerZeroLateToy(DatasetToy):
    flags = ""  # set by the test: a folder the workers can see

    def train_dataset(self, seed: int) -> Dataset:
        return WorkerZeroLate(self.flags, 8, seed, self.samples, self.options.seq_len, self.options.vocab)
