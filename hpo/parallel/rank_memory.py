"""`study.memory_limit_gb` on every rank: each rank's process is held to the limit as a one-process
trial is (`hpo.trial` runs it inside the same two contexts), so a trial of ranks never trains past
a limit its study set. On CUDA each rank's own device is capped; on a CPU each rank's process is
(the ranks share the host's memory, and the limit is each one's, as it is each one's GPU).

A rank over it raises out-of-memory (hpo's meter after forward, or an allocation the cap refuses);
the rank records `oom` with the rank's name (`hpo.parallel.faults`), never the kernel's OOM killer.

Under a limit the rank's C allocator keeps the memory a step frees for the next, as a one-process
trial's runtime sets it (`hpo.hardware._allocator`): its steps then reuse one heap, and the peak the
rank's fit measures (`hpo.parallel.rank_budget`) is its training steps' peak. With glibc's default
thresholds each large block is a fresh mapping while the heap keeps what the last step freed: a
2-rank trial whose fit and confirming step read 1.42 GB at batch 608 a rank had an allocation refused
by the cap (1.5 GB) in its second training step."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch

from hpo.hardware import capped_process, enforced_limit, keep_freed_memory, limit_bytes

__all__ = ["rank_memory_limit"]


@contextlib.contextmanager
def rank_memory_limit(device: torch.device, memory_limit_gb: float | None) -> Iterator[int | None]:
    """Inside, this rank's steps fail as out of memory past `memory_limit_gb` (none: no limit
    beyond the device's own); yields the limit in bytes."""
    limit = None if memory_limit_gb is None else limit_bytes(device, memory_limit_gb)
    if limit is not None:
        keep_freed_memory()
    with enforced_limit(device, limit), capped_process(device, limit):
        yield limit
