"""A hard cap on a CPU trial's process, so that going over `study.memory_limit_gb` fails an
allocation inside the trial (an `oom` verdict) rather than bringing in the kernel's OOM killer.

hpo's meter (`hpo.hardware.MemoryMeter`) reads the resident set at a step's high-water
marks and ends a trial over the limit, but only when it reads: one allocation between two reads
can grow the process far past the limit (a batch of 2048 of a d256 x 4 GPT at seq 256 reached
23 GB and was SIGKILLed by the kernel). The cap is `RLIMIT_DATA`, the process's private writable
memory (heap, anonymous mmap, thread stacks; Linux counts anonymous mmap in it since 4.7):
torch's CPU allocator then fails with "DefaultCPUAllocator: can't allocate memory" and Python with
MemoryError, and the process lives on to record the trial. `RLIMIT_AS` would count the address
space too (shared libraries, reserved but unused arenas): 625 MB after `import torch` where the
data segment is 216 MB. Before 4.7 only `RLIMIT_AS` caps an mmap, so it is used there.

What the cap counts: the trial may grow its private writable memory by what the limit leaves above
its resident set (the interpreter, torch and the forkserver's warm-up are counted in both), plus
CAP_MARGIN so that hpo's meter, whose message names the step, ends an ordinary overrun first. The
cap is set again at every meter read and hand-back (`follow_cap`): the C heap keeps the address
range of a block it freed below one still held, and handing its pages back (`malloc_trim`) leaves
that range in the count, so a cap fixed at the start counted freed memory as the trial's (a GPT
predicted and measured under its limit failed at the cap with 461 MB of free heap in its count).
A cgroup v2 `memory.max` fails no allocation: a cgroup over it has its processes OOM-killed, which
is what this cap exists to avoid (docs/memory.md).
"""

from __future__ import annotations

import contextlib
import os
import platform
import re
import resource
from collections.abc import Iterator
from dataclasses import dataclass

import torch

from hpo.hardware._statm import DATA, RESIDENT, SIZE, statm_bytes
from hpo.logging import get_logger

__all__ = [
    "CAP_MARGIN_FRACTION",
    "CAP_MARGIN_MIN_BYTES",
    "cap_bytes",
    "capped_process",
    "follow_cap",
    "is_out_of_memory",
    "thread_stacks_bytes",
]

_log = get_logger(__name__)

# Above the limit: what the cap allows past it, so that hpo's meter (which reads at the step's
# high-water marks) ends an ordinary overrun, and memory reserved but never touched (a new
# thread's 8 MB stack, a malloc arena's next chunk) is not counted against the trial.
CAP_MARGIN_FRACTION = 0.10
CAP_MARGIN_MIN_BYTES = 128 * 2**20
# torch's CPU allocator's message when malloc fails (c10/core/impl/alloc_cpu.cpp): a RuntimeError.
CPU_ALLOCATOR_FAILED = "DefaultCPUAllocator: can't allocate memory"


def is_out_of_memory(exc: BaseException) -> bool:
    """Whether `exc` is an allocation that failed: CUDA's, Python's, or torch's CPU allocator's
    (which raises a plain RuntimeError)."""
    if isinstance(exc, (torch.OutOfMemoryError, MemoryError)):
        return True
    return isinstance(exc, RuntimeError) and CPU_ALLOCATOR_FAILED in str(exc)


def cap_bytes(limit_bytes: int, counted_bytes: int, resident: int, stacks_bytes: int = 0) -> int:
    """The cap on the rlimit's count (`counted_bytes` now) that lets the process's resident set
    (`resident` now) grow to `limit_bytes`, plus the margin and the stacks of the threads torch
    may start (`stacks_bytes`), which count in full and are barely touched."""
    margin = max(CAP_MARGIN_MIN_BYTES, int(limit_bytes * CAP_MARGIN_FRACTION))
    return counted_bytes + max(0, limit_bytes - resident) + margin + stacks_bytes


def thread_stacks_bytes() -> int:
    """The stacks of torch's intra-op and inter-op threads, counted whether or not they run yet:
    a forkserver child starts its OpenMP pool at its first parallel op, under the cap, and libgomp
    aborts the process when a thread cannot be created. 16 threads added 150 MB to VmData here.
    glibc gives a thread RLIMIT_STACK's soft value, 8 MB by default; where that is unlimited it
    gives a fixed default, which 32 MB is taken to exceed."""
    stack = resource.getrlimit(resource.RLIMIT_STACK)[0]
    stack = 32 * 2**20 if stack == resource.RLIM_INFINITY else stack
    return (torch.get_num_threads() + torch.get_num_interop_threads()) * stack


@dataclass(frozen=True)
class _Cap:
    """The cap this process holds: which rlimit, the statm field it counts, and what it is set from."""

    kind: int
    field: int
    limit_bytes: int
    stacks_bytes: int
    lowest: int | None  # a limit already lower (the user's `ulimit -d`, or the hard one), which stays
    hard: int


_held: _Cap | None = None


@contextlib.contextmanager
def capped_process(device: torch.device, limit_bytes: int | None) -> Iterator[int | None]:
    """While inside, this process's allocations fail past `limit_bytes` (see the module's doc);
    yields the cap in bytes as first set, or None where none is set: no limit, a CUDA trial (the
    allocator's own cap, `hpo.hardware.enforced_limit`) or a system without /proc. The soft limit
    is restored afterwards, so that a worker running trials in its own process caps each alone."""
    global _held
    which = _rlimit()
    if limit_bytes is None or device.type == "cuda" or which is None:
        yield None
        return
    soft, hard = resource.getrlimit(which[0])
    lowest = min((limit for limit in (soft, hard) if limit != resource.RLIM_INFINITY), default=None)
    previous, _held = _held, _Cap(*which, limit_bytes, thread_stacks_bytes(), lowest, hard)
    try:
        yield follow_cap()
    finally:
        _held = previous
        resource.setrlimit(which[0], (soft, hard))


def follow_cap(counts: list[int] | None = None) -> int | None:
    """Set the cap this process holds again from its memory now (`counts`: statm's, in bytes, just
    read; read here when None): what the limit leaves above the resident set, over the count as it
    stands (which the heap's freed address range stays in, see the module's doc). The cap set; None
    where none is held."""
    if _held is None:
        return None
    counts = counts or statm_bytes()
    cap = cap_bytes(_held.limit_bytes, counts[_held.field], counts[RESIDENT], _held.stacks_bytes)
    cap = cap if _held.lowest is None else min(cap, _held.lowest)
    resource.setrlimit(_held.kind, (cap, _held.hard))
    return cap


def _rlimit() -> tuple[int, int] | None:
    """The rlimit that caps anonymous mmap on this kernel, with the /proc/self/statm field that
    counts it (DATA holds the main thread's stack too: a few MB more room); None off Linux, where
    no cap is set and hpo's meter alone holds the limit."""
    if platform.system() != "Linux" or not os.path.exists("/proc/self/status"):
        _log.debug("no hard memory cap off Linux: hpo's meter alone holds study.memory_limit_gb")
        return None
    version = re.match(r"(\d+)\.(\d+)", platform.release())
    if version is None or (int(version[1]), int(version[2])) >= (4, 7):
        return resource.RLIMIT_DATA, DATA
    return resource.RLIMIT_AS, SIZE
