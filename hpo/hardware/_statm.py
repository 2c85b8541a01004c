"""This process's memory counts from /proc/self/statm, read from a file kept open: read after every
training forward (the meter, the hard cap's count), and opening the file each time cost several
times a read from the open file, every step (docs/benchmarks/vs-bare.md)."""

from __future__ import annotations

import os

__all__ = ["DATA", "PAGE_BYTES", "RESIDENT", "SIZE", "statm_bytes"]

# statm's fields, in pages: the address space (VmSize), the resident set, and the private writable
# memory with the main thread's stack (VmData + VmStk: what RLIMIT_DATA counts, and the stack).
SIZE, RESIDENT, DATA = 0, 1, 5
PAGE_BYTES = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096
_statm_fd: tuple[int, int] | None = None  # (pid, fd): a forked child opens its own /proc/self


def statm_bytes() -> list[int]:
    """statm's fields in bytes; OSError where there is no /proc/self/statm (not Linux)."""
    return [int(pages) * PAGE_BYTES for pages in os.pread(_statm(), 128, 0).split()]


def _statm() -> int:
    global _statm_fd
    pid = os.getpid()
    if _statm_fd is None or _statm_fd[0] != pid:
        _statm_fd = (pid, os.open("/proc/self/statm", os.O_RDONLY | os.O_CLOEXEC))
    return _statm_fd[1]
