"""`study.memory_limit_gb` on every rank: each rank's process is held to the limit as a one-process
trial is (`hpo.trial` runs it inside the same two contexts), so a trial of ranks never trains past
a limit its study set. On CUDA each rank's own device is capped; on a CPU each rank's process is
(the ranks share the host's memory, and the limit is each one's, as it is each one's GPU).

A rank over it raises out-of-memory (hpo's meter after forward, or an allocation the cap refuses);
the rank records `oom` with the rank's name (`hpo.parallel.faults`), never the kernel's OOM killer."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch

from hpo.hardware import capped_process, enforced_limit, limit_bytes

__all__ = ["rank_memory_limit"]


@contextlib.contextmanager
def rank_memory_limit(device: torch.device, memory_limit_gb: float | None) -> Iterator[int | None]:
    """Inside, this rank's steps fail as out of memory past `memory_limit_gb` (none: no limit
    beyond the device's own); yields the limit in bytes."""
    limit = None if memory_limit_gb is None else limit_bytes(device, memory_limit_gb)
    with enforced_limit(device, limit), capped_process(device, limit):
        yield limit
