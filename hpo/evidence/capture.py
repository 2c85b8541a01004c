"""Capture the evidence of one real training step: profiler ops, matmul dtypes, recomputation."""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator

from torch.profiler import ProfilerActivity, profile

from hpo.engine import AssembledModel
from hpo.evidence.dispatch import MatmulDtypeRecorder
from hpo.evidence.observe import StepEvidence
from hpo.torch_compat import COMPILE_PROFILER_RANGES


@contextlib.contextmanager
def capture_step(assembled: AssembledModel) -> Iterator[StepEvidence]:
    """Profile the step run inside; the StepEvidence is complete when the block exits."""
    evidence = StepEvidence(graphs=assembled.graphs)
    before_backward_runs = assembled.recompute.backward_runs
    # CPU activity only, on every device: the op names evidence matches (aten ops, custom ops,
    # autograd Function names) are recorded on the CPU side. CUDA activity (CUPTI) is not needed,
    # can be refused on locked-down hosts, and can leave kernels slower after profiling (pytorch#144455).
    activities = [ProfilerActivity.CPU]
    # A dispatch mode would be traced into a compiled graph; compiled graphs report dtypes themselves.
    recorder = MatmulDtypeRecorder() if not assembled.knobs.compile else contextlib.nullcontext()
    prof = profile(activities=activities)
    with stderr_silenced():  # kineto prints "USDT ... profiler_start" from C++ on every start
        prof.start()
    try:
        with recorder:
            yield evidence
    finally:
        with stderr_silenced():
            prof.stop()
    _fill(evidence, assembled, prof, recorder, before_backward_runs)


def _fill(evidence: StepEvidence, assembled: AssembledModel, prof: profile, recorder, before_backward_runs: int) -> None:
    """The evidence of the step just profiled: the ops the profiler saw, the dtypes the recorder
    saw, and what the model counted in the step."""
    evidence.profiler_ops, evidence.optimizer_ops = ops_seen(prof, inside="Optimizer.step#")
    if isinstance(recorder, MatmulDtypeRecorder):
        evidence.matmul_dtypes = recorder.dtypes
        evidence.attention_dtypes = recorder.attention_dtypes
    evidence.optimizer_module = type(assembled.optimizer).__module__
    evidence.in_step = dict(assembled.in_step)
    evidence.grad_scaler_scale = assembled.scaler.get_scale() if assembled.scaler else None
    evidence.recompute_in_step = assembled.recompute.backward_runs - before_backward_runs


def ops_seen(prof: profile, inside: str) -> tuple[set[str], set[str]]:
    """Every op name the profiler saw execute, and those that ran within a range whose name starts
    with `inside` on the same thread. Ops recorded while torch.compile traced or compiled (Dynamo's
    fake-tensor trace, AOTAutograd's, a lazy backward compile) are left out: they show what was
    traced under the knobs, not what ran, and a graph served from a cache need not match them. Read
    from the raw kineto events: `prof.events()` builds the full event tree in Python, 0.3-0.4 s for
    a MiniLM step here, more than the step itself."""
    raw = [(e.name(), e.start_thread_id(), e.start_ns(), e.end_ns()) for e in prof.profiler.kineto_results.events()]
    compiling = _ranges(raw, lambda name: name in COMPILE_PROFILER_RANGES)
    executed = [event for event in raw if event[0] not in COMPILE_PROFILER_RANGES and not _within(event, compiling)]
    ranges = _ranges(executed, lambda name: name.startswith(inside))
    within = {event[0] for event in executed if not event[0].startswith(inside) and _within(event, ranges)}
    return {name for name, *_ in executed}, within


def _ranges(raw: list[tuple], named) -> list[tuple[int, int, int]]:
    """(thread, start, end) of each event whose name satisfies `named`."""
    return [(thread, start, end) for name, thread, start, end in raw if named(name)]


def _within(event: tuple, ranges: list[tuple[int, int, int]]) -> bool:
    _, thread, start, end = event
    return any(thread == t and s <= start and end <= e for t, s, e in ranges)


@contextlib.contextmanager
def stderr_silenced() -> Iterator[None]:
    """Point file descriptor 2 at /dev/null for a moment; Python-level errors are unaffected
    because nothing else runs inside."""
    sys.stderr.flush()
    saved = os.dup(2)
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, 2)
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)
        os.close(devnull)
