"""The busy host of `bench-false-slow`: 3 x os.cpu_count() processes that spin on the CPU for as
long as the benchmark runs, as other users' jobs do on a shared node (issue 48 saw load 3-5x the
cores). They run in their own process group, so one signal ends them all, even a spinner that a
crash of the benchmark would otherwise orphan."""

from __future__ import annotations

import contextlib
import functools
import os
import signal
import subprocess
import sys
from collections.abc import Iterator

__all__ = ["LOAD_FACTOR", "busy_cores", "load_average"]

LOAD_FACTOR = 3
# Pure-Python arithmetic: always runnable, never sleeps, holds no lock the benchmark needs.
_SPIN = "x = 0\nwhile True:\n    x = (x * 31 + 7) % 1000003\n"


def load_average() -> list[float]:
    """The 1, 5 and 15 minute load averages as os.getloadavg gives them."""
    return [round(v, 2) for v in os.getloadavg()]


@contextlib.contextmanager
def busy_cores(factor: int = LOAD_FACTOR) -> Iterator[int]:
    """`factor` x os.cpu_count() spinning processes while the block runs; yields how many."""
    count = factor * (os.cpu_count() or 1)
    spinners: list[subprocess.Popen] = []
    try:
        for _ in range(count):  # the first leads a new process group, the others join it
            group = spinners[0].pid if spinners else 0
            join = functools.partial(os.setpgid, 0, group)  # Popen(process_group=) is Python 3.11+
            spinners.append(subprocess.Popen([sys.executable, "-c", _SPIN], preexec_fn=join))
        yield count
    finally:
        if spinners:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(spinners[0].pid, signal.SIGKILL)
        for proc in spinners:
            proc.wait()
