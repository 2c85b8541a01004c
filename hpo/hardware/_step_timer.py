"""Step times without making the host wait for the device on every step.

`start()` and `stop()` bracket a step; `read()`, at a check boundary, returns the seconds of every
step stopped since the last read, in order. On CPU the host's `perf_counter` is exact (nothing runs
asynchronously), so `StepTimer` times with it. On CUDA the host only launches the work, so
`CudaStepTimer` records a CUDA event (`torch.cuda.Event(enable_timing=True)`) on the current stream
before and after each step, and reads their elapsed times at the boundary, after waiting once for
the last one. A step's event interval runs from the moment the device reached its start to the
moment it finished its last kernel: its device time, plus any time the device sat waiting for the
host (a slow batch fetch or the compilation in the first step), as a synchronized wall clock
would count it.

Between boundaries `host_s` is the host's wall time of the steps not yet read. On CUDA it is a
lower bound of their time: after a boundary the device is idle, and it can finish the launched
steps no sooner than the host launched them. The trainer judges the time budget and the time
marks on it between boundaries, so neither is reached early; the exact figure is read then.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable
from typing import Any

import torch

__all__ = ["CudaStepTimer", "StepTimer", "step_timer"]


class StepTimer:
    """The host's wall clock: exact where the device runs synchronously (CPU)."""

    def __init__(self) -> None:
        self._host: list[float] = []
        self._host_s, self._started = 0.0, 0.0

    def start(self) -> None:
        self._started = time.perf_counter()

    def stop(self) -> None:
        elapsed = time.perf_counter() - self._started
        self._host.append(elapsed)
        self._host_s += elapsed

    @property
    def host_s(self) -> float:
        """Host wall time of the steps stopped since the last `read`."""
        return self._host_s

    def read(self) -> list[float]:
        """Seconds of each step stopped since the last read, in order."""
        times, self._host, self._host_s = self._host, [], 0.0
        return times


class CudaStepTimer(StepTimer):
    """CUDA events around each step, read at boundaries. `new_event` makes a timing event (tests
    pass a fake that records its calls); events are reused once read, so none is made per step."""

    def __init__(self, new_event: Callable[[], Any] | None = None) -> None:
        super().__init__()
        self._new_event = new_event or functools.partial(torch.cuda.Event, enable_timing=True)
        self._pending: list[tuple[Any, Any]] = []  # (start, stop) events of the steps not yet read
        self._spare: list[Any] = []
        self._begin: Any = None

    def _event(self) -> Any:
        event = self._spare.pop() if self._spare else self._new_event()
        event.record()  # on the current stream, after the work launched so far
        return event

    def start(self) -> None:
        super().start()
        self._begin = self._event()

    def stop(self) -> None:
        self._pending.append((self._begin, self._event()))
        super().stop()

    def read(self) -> list[float]:
        super().read()
        if not self._pending:
            return []
        self._pending[-1][1].synchronize()  # the boundary's wait: every earlier event is done too
        times = [start.elapsed_time(stop) / 1000 for start, stop in self._pending]  # milliseconds
        for pair in self._pending:
            self._spare.extend(pair)
        self._pending = []
        return times


def step_timer(device: torch.device) -> StepTimer:
    """The timer for `device`: CUDA events on CUDA, the host's clock elsewhere."""
    return CudaStepTimer() if device.type == "cuda" else StepTimer()
