"""The C allocator a trial trains under: glibc keeps the memory a training step frees for the next.

By default glibc serves large blocks with mmap and hands freed memory back to the kernel (its
mmap and trim thresholds). A training step frees and allocates the same activations and gradients
every step (MiniLM's 45 MiB embedding gradient among them), so each step faulted its memory back
in, thousands of pages a step, and none once the heap is kept: a step's wall and system time fall
(measured in docs/benchmarks/vs-hf.md, "Trial processes keep freed memory"). `release_freed_memory`
hands the free memory back when a trial ends, so a later trial in the same process measures its
own peak.

The cost: freed blocks stay resident. A block freed while a small neighbour sits in glibc's thread
cache cannot merge, so a loop that allocates one large size and little else can hold up to seven
such blocks apart before reusing them (tests/hardware/test_allocator.py). A real step allocates
much else in between, so the peak resident set of a real model barely moves (the same page).

Only glibc has these settings; elsewhere (macOS, musl) the system allocator runs as it is, and
the trial records which of the two ran.

Kept memory also makes a timing steady from its first step: `prefault_heap` touches the pages a
step will need before the step runs, and `page_faults` tells a step that still faulted memory in
(see `hpo.verify.timing._reference_time`, which times the probe's reference that way).
"""

from __future__ import annotations

import ctypes
import functools
import resource
import time
from dataclasses import dataclass

import torch

__all__ = ["Prefault", "freed_memory_kept", "keep_freed_memory", "page_faults", "prefault_heap", "release_freed_memory"]

# mallopt's parameter numbers (malloc.h).
_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3
# Blocks up to this size come from the heap, not from mmap: larger than any activation or gradient
# of a model that trains on a CPU, yet a single huge tensor still gets its own mapping.
MMAP_THRESHOLD_BYTES = 1 << 30
# The free memory at the heap's top that glibc keeps before trimming: mallopt's largest value,
# so it never trims during a trial.
TRIM_THRESHOLD_BYTES = 2**31 - 1
PAGE_BYTES = resource.getpagesize()
_kept = False  # set once glibc took both thresholds in this process: they stay for its lifetime


@functools.cache
def _glibc() -> ctypes.CDLL | None:
    """The process's C library when it is glibc; mallopt and malloc_trim are glibc's."""
    try:
        libc = ctypes.CDLL(None)
    except OSError:
        return None
    return libc if hasattr(libc, "gnu_get_libc_version") and hasattr(libc, "malloc_trim") else None


def _glibc_version(libc: ctypes.CDLL) -> str:
    libc.gnu_get_libc_version.restype = ctypes.c_char_p
    return libc.gnu_get_libc_version().decode()


@functools.cache
def keep_freed_memory() -> str:
    """Set the process's allocator to keep freed memory; returns what runs, for the trial record.
    Once per process: the setting is process-wide, and a forked trial process inherits it."""
    libc = _glibc()
    if libc is None:
        return "system allocator (not glibc: no mallopt)"
    version = _glibc_version(libc)
    set_mmap = libc.mallopt(_M_MMAP_THRESHOLD, ctypes.c_int(MMAP_THRESHOLD_BYTES))
    set_trim = libc.mallopt(_M_TRIM_THRESHOLD, ctypes.c_int(TRIM_THRESHOLD_BYTES))
    refused = [name for name, ok in (("mmap_threshold", set_mmap), ("trim_threshold", set_trim)) if not ok]
    if refused:  # mallopt returns 0 for a value this glibc refuses: that threshold stays glibc's own
        return f"glibc {version}, mallopt refused {' and '.join(refused)} (left at glibc's default)"
    global _kept
    _kept = True
    return f"glibc {version}, freed memory kept (mmap_threshold {MMAP_THRESHOLD_BYTES >> 20} MiB, no trim)"


def release_freed_memory() -> None:
    """Hand the heap's free pages back to the kernel (after a trial)."""
    libc = _glibc()
    if libc is not None:
        libc.malloc_trim(0)


def freed_memory_kept() -> bool:
    """Whether this process's allocator keeps freed memory (`keep_freed_memory` ran and glibc took it)."""
    return _kept


def page_faults() -> int:
    """Minor page faults of this process so far, every thread's: memory touched for the first time."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt


@dataclass(frozen=True)
class Prefault:
    nbytes: int
    seconds: float
    faults: int

    @property
    def seconds_per_fault(self) -> float:
        """What one page fault costs on this host, as measured by the prefault itself."""
        return self.seconds / max(self.faults, 1)


def prefault_heap(nbytes: int) -> Prefault | None:
    """Touch `nbytes` of heap once and free them, so that the allocations that follow (up to that
    size, from this thread) find their pages resident. None where freed memory is not kept (it
    would go straight back to the kernel), or for a block glibc would map on its own (over the
    mmap threshold, which it unmaps when freed): only the pages up to that threshold are touched."""
    if not freed_memory_kept():
        return None
    nbytes = min(nbytes, MMAP_THRESHOLD_BYTES - PAGE_BYTES)
    before, start = page_faults(), time.perf_counter()
    block = torch.empty(nbytes, dtype=torch.uint8)
    block[::PAGE_BYTES] = 1  # one byte a page faults the page in; writing the rest would only cost time
    del block
    return Prefault(nbytes, time.perf_counter() - start, page_faults() - before)
