"""`systems.loader: dali`: the workload's map-style dataset through an NVIDIA DALI pipeline.

DALI's parallel external source (`fn.external_source(..., parallel=True)`) reads the samples in
`num_workers` spawned Python processes, DALI batches them and, on a CUDA trial, copies the batch to
the GPU itself (`.gpu()`), where its iterator (`nvidia.dali.plugin.pytorch.DALIGenericIterator`)
hands torch tensors over. The order is the seeded DataLoader's: sample i of epoch e is the i-th index
of the e-th pass of the same `RandomSampler` (`hpo.workloads.dataset_batches.seeded_loader`), whole
batches only, so the loader check (`hpo.engine._loader_stream`) compares DALI's first batches with
torch's without workers, checksum against checksum, as it does a DataLoader's.

DALI stacks the samples itself: a workload whose `collate` does more than stack (pads, say) gives
other batches, and the loader check says so (`mismatch`). Each sample also carries the pid of the
process that read it, the evidence of which workers delivered the batch.

Only on CUDA (the machine check and `hpo.engine.check_settings` refuse it elsewhere, as the
issue that asked for it set). The pipeline itself runs on a CPU too (`device_id=None`), which is
how the tests prove the order and the batches without a GPU.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import torch
from torch.utils.data import Dataset, RandomSampler

from hpo import deps
from hpo.workloads.base import Batch

__all__ = ["SeededSamples", "dali_batches"]

PID = "_pid"  # the extra output: which process read each sample


class SeededSamples:
    """DALI's per-sample source: sample `idx_in_epoch` of epoch `epoch_idx` in the seeded loader's
    order; StopIteration past the last whole batch (the DataLoader drops a partial one). Pickled to
    each DALI worker, which replays the sampler's passes up to the epoch asked for."""

    def __init__(self, dataset: Dataset, keys: list[str], batch_size: int, seed: int):
        self.dataset, self.keys, self.seed = dataset, keys, seed
        self.whole = (len(dataset) // batch_size) * batch_size
        self._sampler: RandomSampler | None = None
        self._orders: list[list[int]] = []

    def __getstate__(self) -> dict:
        return {**self.__dict__, "_sampler": None, "_orders": []}  # each process replays its own

    def order(self, epoch: int) -> list[int]:
        if self._sampler is None:
            self._sampler = RandomSampler(self.dataset, generator=torch.Generator().manual_seed(self.seed))
        while len(self._orders) <= epoch:
            self._orders.append(list(self._sampler))
        return self._orders[epoch]

    def __call__(self, info) -> tuple:
        if info.idx_in_epoch >= self.whole:
            raise StopIteration
        sample = self.dataset[self.order(info.epoch_idx)[info.idx_in_epoch]]
        import numpy

        # DALI takes densely packed arrays only (a crop or a flip is a strided view).
        return (*(sample[k].contiguous().numpy() for k in self.keys), numpy.array(os.getpid(), dtype=numpy.int64))


def dali_batches(
    dataset: Dataset, batch_size: int, seed: int, num_workers: int, device: torch.device
) -> Iterator[tuple[Batch, set[int]]]:
    """Batches of `dataset` from a DALI pipeline, epoch after epoch, each with the pids that read it.
    `num_workers` 0 reads the samples in this process (DALI's external source, not parallel)."""
    deps.require("nvidia_dali")
    from nvidia.dali.plugin.pytorch import DALIGenericIterator, LastBatchPolicy

    keys = sorted(dataset[0])
    pipeline = _pipeline(SeededSamples(dataset, keys, batch_size, seed), len(keys), batch_size, seed, num_workers, device)
    iterator = DALIGenericIterator([pipeline], output_map=[*keys, PID], last_batch_policy=LastBatchPolicy.DROP, auto_reset=True)
    return _epochs(iterator)


def _pipeline(source: SeededSamples, outputs: int, batch_size: int, seed: int, num_workers: int, device: torch.device):
    """DALI's pipeline reading `source`'s `outputs` tensors and the pid per sample; on a CUDA trial
    the tensors are copied to the GPU by DALI itself, the pids stay on the CPU."""
    from nvidia.dali import fn, pipeline_def

    gpu = device.type == "cuda"

    @pipeline_def(
        batch_size=batch_size,
        num_threads=1,
        device_id=_device_id(device) if gpu else None,
        py_num_workers=max(num_workers, 1),
        py_start_method="spawn",  # a trial process must not fork after torch started its threads
        seed=seed,
    )
    def pipeline():
        read = fn.external_source(source=source, num_outputs=outputs + 1, batch=False, parallel=num_workers > 0)
        return (*(o.gpu() if gpu else o for o in read[:-1]), read[-1])

    return pipeline()


def _device_id(device: torch.device) -> int:
    """The CUDA ordinal DALI runs on: the device's own, or the current one for a bare `cuda`."""
    return device.index if device.index is not None else torch.cuda.current_device()


def _epochs(iterator) -> Iterator[tuple[Batch, set[int]]]:
    while True:
        for (batch,) in iterator:
            pids = batch.pop(PID)
            yield batch, {int(p) for p in pids.flatten().tolist()}
