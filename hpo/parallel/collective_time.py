"""The share of a step spent in collectives, read from the profiler, not timed around the calls.

DDP and FSDP2 launch their collectives asynchronously (DDP from its gradient hooks, waited on
after backward, in C++), so a clock around the call would time the launch, not the transfer. The
profiler records each collective as a span: on gloo, the process group's `gloo:<collective>`
event, from its enqueue to its completion on gloo's own thread; on NCCL, the `nccl…` kernels on
the GPU's timeline (the CPU's `nccl:<collective>` event covers only the launch). The share is the
time any of them was in flight, merged where they overlap, over the step's wall time, both on the
profiler's clock. Compute running meanwhile is not subtracted: the share says how much of the
step had communication in flight, whether or not the step waited for it.

On CUDA this turns on the profiler's CUDA activity (CUPTI) for the recorded step, which hpo's
evidence profiler leaves off because it can leave kernels slower after profiling (pytorch#144455),
and the steady steps are timed after the recorded one: not yet run on a GPU."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass

import torch
from torch.profiler import ProfilerActivity, profile, record_function

from hpo.evidence.capture import stderr_silenced
from hpo.hardware import synchronize

__all__ = ["CollectiveTime", "in_flight_share", "is_collective", "timed_collectives"]

STEP_RANGE = "hpo::parallel_step"


@dataclass
class CollectiveTime:
    """Filled when the `timed_collectives` block ends."""

    share: float | None = None
    collective_ms: float | None = None
    step_ms: float | None = None


def is_collective(name: str) -> bool:
    return name.startswith("gloo:") or (name.startswith("nccl") and not name.startswith("nccl:"))


def in_flight_share(step: tuple[int, int], spans: list[tuple[int, int]]) -> tuple[float, int]:
    """The share of `step` (start, end) covered by at least one span, and that covered time."""
    start, end = step
    covered, reached = 0, start
    for s, e in sorted(spans):
        s, e = max(s, reached), min(e, end)
        if e > s:
            covered += e - s
            reached = e
    return (covered / (end - start) if end > start else 0.0), covered


@contextlib.contextmanager
def timed_collectives(device: torch.device) -> Iterator[CollectiveTime]:
    """Profile the block (one step) and fill in the share of it that collectives were in flight."""
    timed = CollectiveTime()
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
    prof = profile(activities=activities)
    with stderr_silenced():  # kineto prints "USDT ... profiler_start" from C++ on every start
        prof.start()
    try:
        with record_function(STEP_RANGE):
            yield timed
            synchronize(device)  # the step's kernels, collectives included, end inside its range
    finally:
        with stderr_silenced():
            prof.stop()
    events = [(e.name(), e.start_ns(), e.end_ns()) for e in prof.profiler.kineto_results.events()]
    steps = [(s, e) for name, s, e in events if name == STEP_RANGE]
    if steps:
        timed.share, covered = in_flight_share(steps[0], [(s, e) for name, s, e in events if is_collective(name)])
        timed.collective_ms, timed.step_ms = covered / 1e6, (steps[0][1] - steps[0][0]) / 1e6
