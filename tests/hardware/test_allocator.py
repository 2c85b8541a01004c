"""The C allocator setting: it must change what a training process does, not only be set. Each
check runs in a fresh process, since the setting is process-wide and pytest's process has it."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from hpo.hardware import _allocator as allocator

# Allocates, fills and frees a 48 MiB tensor (as a step does its embedding gradient) 36 times, and
# reports the page faults of the last four, then the resident set before and after a release.
# Not the first ones: each aligned block leaves a small tail in glibc's thread cache, which keeps
# the freed block from merging until that cache's bin (seven entries) is full. The tail takes one
# of four sizes (the block's offset from 64-byte alignment), so reuse starts by the 29th block at
# the latest (seen: after the 7th, sometimes the 14th).
_PROBE = """
import json, resource, sys, torch
from hpo.hardware import _allocator as allocator
setting = allocator.keep_freed_memory() if sys.argv[1] == "keep" else "glibc default"
def faults():
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt
def rss_mb():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * resource.getpagesize() / 2**20
counts = []
for _ in range(36):
    before = faults()
    block = torch.empty(12 * 2**20, dtype=torch.float32).fill_(1.0)
    del block
    counts.append(faults() - before)
held = rss_mb()
allocator.release_freed_memory()
print(json.dumps({"setting": setting, "faults": counts[-4:], "held_mb": held, "released_mb": rss_mb()}))
"""


def _run(mode: str) -> dict:
    out = subprocess.run([sys.executable, "-c", _PROBE, mode], capture_output=True, text=True, check=True)
    return json.loads(out.stdout.splitlines()[-1])


@pytest.mark.skipif(allocator._glibc() is None, reason="mallopt is glibc's; this C library has none")
def test_kept_memory_stops_the_page_faults_of_repeated_large_blocks_and_release_returns_it():
    default, kept = _run("default"), _run("keep")
    assert kept["setting"].startswith("glibc ") and "freed memory kept" in kept["setting"]
    # 48 MiB is above glibc's largest adaptive mmap threshold (32 MiB): by default every block is
    # a fresh mapping, faulted in page by page (12288 pages of 4 KiB).
    assert min(default["faults"]) > 6000, default
    assert max(kept["faults"]) < 200, kept
    # Kept memory stays resident until released; the release hands it back.
    assert kept["held_mb"] - kept["released_mb"] > 40, kept


def test_without_glibc_the_system_allocator_is_recorded(monkeypatch):
    monkeypatch.setattr(allocator, "_glibc", lambda: None)
    allocator.keep_freed_memory.cache_clear()
    try:
        assert allocator.keep_freed_memory() == "system allocator (not glibc: no mallopt)"
        allocator.release_freed_memory()  # nothing to release, and no error
    finally:
        allocator.keep_freed_memory.cache_clear()


def test_a_refused_threshold_is_recorded_as_refused(monkeypatch):
    class RefusingGlibc:
        def __init__(self):
            self.gnu_get_libc_version = lambda: b"2.36"

        def mallopt(self, param, value):
            return 0 if param == allocator._M_MMAP_THRESHOLD else 1  # refuses the mmap threshold only

    monkeypatch.setattr(allocator, "_glibc", RefusingGlibc)
    allocator.keep_freed_memory.cache_clear()
    try:
        assert allocator.keep_freed_memory() == "glibc 2.36, mallopt refused mmap_threshold (left at glibc's default)"
    finally:
        allocator.keep_freed_memory.cache_clear()
