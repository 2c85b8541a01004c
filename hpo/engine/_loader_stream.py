"""The batches a trial trains on, observed and checked: how long each step waited for its batch,
which processes made the batches, whether they arrived pinned, and, with loader workers, that the
first batches hold the samples the same seed gives without workers.

Which samples a batch holds is told by what identifies them: a map-style dataset's indices, as the
process that made each sample fetched them, so augmentation drawn from each worker's own RNG (the
torchvision habit: torch seeds every worker apart) is not a difference; an iterable dataset's
samples have no index, so its batches are compared by content (checksums), as DALI's are, whose
check also covers a `collate` that does more than stack.

Workers that reorder, duplicate or drop samples end the trial `mismatch: loader ...`; workers that
cannot start or die (a dataset that cannot be pickled to a spawned worker, shared memory exhausted)
end it `incompatible: loader ...` with the upstream cause: the same batches were just made without
workers, so the workers are what failed, not the data."""

from __future__ import annotations

import contextlib
import hashlib
import os
import statistics
import time
from collections.abc import Iterator

import torch
from torch.utils.data import DataLoader, IterableDataset

from hpo.config.trial import TrialConfig
from hpo.engine._dali_loader import dali_batches
from hpo.engine._loader import CoreSplit, check_settings, core_split, trial_loader
from hpo.errors import TrialRejected
from hpo.verdicts import Kind, Verdict
from hpo.workloads.base import Batch, Workload
from hpo.workloads.dataset_batches import epochs

__all__ = ["BatchStream", "batch_checksum", "batch_stream", "checked_batches"]


def batch_checksum(batch: Batch) -> str:
    """A digest of every tensor of the batch: its key, dtype, shape and bytes."""
    digest = hashlib.sha1()
    for key in sorted(batch):
        tensor = batch[key].detach().cpu().contiguous()
        digest.update(f"{key}:{tensor.dtype}:{tuple(tensor.shape)}".encode())
        digest.update(tensor.view(torch.uint8).numpy().tobytes() if tensor.numel() else b"")
    return digest.hexdigest()[:16]


def checked_batches(num_workers: int, max_steps: int) -> int:
    """How many first batches the loader check compares: two rounds of the workers (a worker that
    reorders or repeats shows within them), at most the trial's steps."""
    return min(max_steps, max(2, 2 * num_workers))


class BatchStream:
    """Batches with what delivered them. `next_batch` is the only way the trainer gets one."""

    def __init__(
        self, source: Iterator, tagged: bool, reference: list[str], device: torch.device, describe: str, workers: int = 0
    ):
        self.source, self.tagged, self.reference, self.device, self.describe = source, tagged, reference, device, describe
        self.workers = workers
        self.waits: list[float] = []
        self.pids: set[int] = set()
        self.pinned: list[bool] = []
        self.delivered_on: set[str] = set()
        self.split: CoreSplit | None = None

    def next_batch(self) -> Batch:
        start = time.perf_counter()
        try:
            item = next(self.source)
        except Exception as exc:
            # Within the checked batches, the same samples were just made without workers.
            if self.workers == 0 or len(self.waits) >= max(1, len(self.reference)):
                raise
            raise _workers_failed(self.describe, exc) from exc
        self.waits.append(time.perf_counter() - start)
        # (batch, pid, indices) from the DataLoader (`hpo.engine._loader.Tagged`), (batch, pids) from DALI.
        batch, pid, *indices = item if self.tagged else (item, os.getpid())
        self.pids |= pid if isinstance(pid, set) else {pid}  # DALI: the pids that read the batch's samples
        self.pinned.append(all(t.is_pinned() for t in batch.values()))
        self.delivered_on.add(next(iter(batch.values())).device.type)
        step = len(self.waits) - 1
        if step < len(self.reference):
            self._check(step, batch, indices[0] if indices else None)
        return batch

    def _check(self, step: int, batch: Batch, indices: tuple[int, ...] | None) -> None:
        expected = self.reference[step]
        if indices is not None and indices != expected:
            raise _differs(
                self.describe, step, f"it holds samples {_few(indices)} instead of {_few(expected)} "
                "(workers reordered, repeated or dropped samples)"
            )  # fmt: skip
        if indices is None and batch_checksum(batch) != expected:
            raise _differs(
                self.describe, step, "its content differs (workers reordered, repeated or dropped samples; an iterable "
                "dataset has no sample indices, so it is compared by content: it must shard by whole batches and draw "
                "its randomness from the seed, not from a worker's RNG)"
            )  # fmt: skip

    def observed(self, evidence_at: int | None = None) -> dict:
        """What delivered the batches: worker processes (the trial's own process not counted), pinned
        (null where pinning does nothing: no CUDA device), the median wait and the core split."""
        waits = [w for i, w in enumerate(self.waits) if i != evidence_at] or self.waits
        return {
            "workers": len(self.pids - {os.getpid()}),
            "main_process": os.getpid() in self.pids,
            "pinned": all(self.pinned) if self.device.type == "cuda" and self.pinned and self.delivered_on == {"cpu"} else None,
            "delivered_on": sorted(self.delivered_on),
            "batches_checked": min(len(self.reference), len(self.waits)),
            "checked_by": self.checked_by(),
            "data_wait_ms": 1000 * statistics.median(waits) if waits else None,
            "core_split": self.split.as_dict() if self.split else None,
        }

    def checked_by(self) -> str | None:
        """What told the batches apart from num_workers=0's: the samples' `indices`, or their `content`."""
        if not self.reference:
            return None
        return "indices" if isinstance(self.reference[0], tuple) else "content"

    def wait_s(self, evidence_at: int | None = None) -> float:
        """Seconds the training steps waited for their batches (the profiled step's not counted)."""
        return sum(w for i, w in enumerate(self.waits) if i != evidence_at)


def _differs(describe: str, step: int, how: str) -> TrialRejected:
    return TrialRejected(
        Verdict.make(
            Kind.MISMATCH,
            f"loader {describe}: batch {step} differs from the one num_workers=0 gives for the same seed: {how}",
        )
    )


def _few(indices: tuple[int, ...]) -> str:
    shown = ", ".join(map(str, indices[:6]))
    return f"[{shown}{', ...' if len(indices) > 6 else ''}]"


def _workers_failed(describe: str, exc: BaseException) -> TrialRejected:
    cause = str(exc).strip().splitlines()[0][:300] if str(exc).strip() else ""
    return TrialRejected(
        Verdict.make(Kind.INCOMPATIBLE, f"loader {describe}: workers failed: {type(exc).__name__}: {cause}".rstrip(": "))
    )


def _reference(plain: DataLoader, count: int, by_content: bool) -> list:
    """What the first `count` batches hold without workers: each one's sample indices, drawn from the
    sampler alone (nothing is loaded), or, for an iterable dataset or `by_content`, its checksum."""
    if by_content or isinstance(plain.dataset, IterableDataset):
        batches = epochs(plain)
        return [batch_checksum(next(batches)[0]) for _ in range(count)]
    reference: list[tuple[int, ...]] = []
    while len(reference) < count:
        epoch = [tuple(indices) for indices in plain.batch_sampler]  # a new shuffle each pass, as the loader's
        if not epoch:
            break  # no whole batch: the trial's own loader says so (`epochs`)
        reference += epoch[: count - len(reference)]
    return reference


@contextlib.contextmanager
def batch_stream(workload: Workload, config: TrialConfig, device: torch.device) -> Iterator[BatchStream]:
    """The trial's batches: the workload's own `train_batches`, or its dataset through the loader
    built from the trial's settings, a DataLoader or DALI's pipeline (`hpo.engine._dali_loader`),
    checked against the same seed through a DataLoader without workers first."""
    settings, training = config.loader, config.training
    check_settings(workload, settings, device)
    if not workload.gives_dataset() or workload.trainer != "hpo":
        yield BatchStream(workload.train_batches(training.batch_size, config.seed), False, [], device, "train_batches")
        return
    describe = ", ".join(f"{k}={v}" for k, v in settings.as_dict().items() if k != "loader" or v != "torch")
    reference = _checked_reference(workload, config)
    if settings.loader == "dali":
        source = dali_batches(workload.train_dataset(config.seed), training.batch_size, config.seed, settings.num_workers, device)
        yield BatchStream(source, True, reference, device, describe, max(settings.num_workers, 1))
        return
    with _loader_stream(workload, config, device, reference, describe) as stream:
        yield stream


def _checked_reference(workload: Workload, config: TrialConfig) -> list:
    """What the first batches must hold, from a DataLoader without workers: none to check without
    workers, except DALI's, checked by content with or without workers."""
    settings, training = config.loader, config.training
    dali = settings.loader == "dali"
    if settings.num_workers == 0 and not dali:
        return []
    count = checked_batches(max(settings.num_workers, 1), training.max_steps)
    plain = trial_loader(workload, settings, training.batch_size, config.seed, reference=True)
    return _reference(plain, count, by_content=dali)


@contextlib.contextmanager
def _loader_stream(
    workload: Workload, config: TrialConfig, device: torch.device, reference: list, describe: str
) -> Iterator[BatchStream]:
    """The batches of the trial's DataLoader, under the CPU core split, its workers ended on exit."""
    settings = config.loader
    with core_split(settings, device) as split:
        loader = trial_loader(workload, settings, config.training.batch_size, config.seed)
        try:
            source = epochs(loader)
            stream = BatchStream(source, True, reference, device, describe, settings.num_workers)
            stream.split = split
            yield stream
        finally:
            source.close()  # ends the epoch's iterator, so its workers (persistent ones too) exit now
