"""Steady-state step timing: the one warm-up and repeat policy behind every step time that becomes
a verdict or a ranking (`hpo probe` and the Lightning path's probe, the slow proof, probe_first's
sweep and its re-timing).

A first call is not a speed. cuDNN attention builds and caches an execution plan per shape, dtype
and thread (`aten/src/ATen/native/cudnn/MHA.cpp`), a compiled model compiles on its first call, an
optimizer creates its state on its first step, and on CPU the first full-batch steps fault their
memory in. On an H200 a first call timed as the speed made bf16 `sdpa_cudnn` read 120-293 samples/s
in the probe against 4470 in training. So, as the tools that time kernels and steps for a living do:
- untimed steps first, at exactly the timed shape, dtype and mode (DeepSpeed autotuning times
  steps 3-5; NeMo's AutoConfigurator drops the first 5 step times; triton's `do_bench` warms up
  for 25 ms; nanoGPT's bench burns in 10 steps);
- then timed steps, repeated until the fastest `window` of them agree within `steady_spread`, or a
  cap (`max_repeats`, `max_timed_s`) is reached: never stopped early by one slow step.

Noise on a shared machine only ever adds time, so the fastest steps are the steady ones, and the
spread is taken over them: a step slowed by a neighbour's burst lengthens the timing, it does not
become the speed. What was timed is kept whole (`StepTimes.times_ms`), so a decision made from it
can be explained afterwards.
"""

from __future__ import annotations

import dataclasses
import statistics
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass

import torch

from hpo.engine import AssembledModel, NonFiniteLoss, run_step
from hpo.hardware import synchronize
from hpo.verify.timing._step_deadline import Outlasted, StepDeadline, deadline_for
from hpo.workloads.base import Batch

__all__ = ["DEFAULT_POLICY", "ONE_STEP", "StepTimes", "TimingPolicy", "time_model", "time_steps", "timed_step"]


@dataclass(frozen=True, kw_only=True)
class TimingPolicy:
    """How a step is timed. The defaults cost 1 + 3 steps where the machine is steady, at most 1 + 10
    where it is not, and 1 + 1 for a step over max_timed_s."""

    warmup_steps: int = 1  # untimed, at the timed shape, dtype and mode
    min_repeats: int = 3
    max_repeats: int = 10
    window: int = 3  # the fastest steps whose spread decides whether the timing is steady
    steady_spread: float = 0.10  # (slowest - fastest) / fastest of the window
    # No more repeats past this much timed time, min_repeats or not: a step this long is timed
    # once or twice (MiniLM at batch 16 on one EPYC core: 1.1 s fp32, 17 s emulated bf16).
    max_timed_s: float = 1.0

    def __post_init__(self) -> None:
        if not 1 <= self.window <= self.min_repeats <= self.max_repeats:
            raise ValueError(
                f"TimingPolicy: 1 <= window <= min_repeats <= max_repeats must hold, got "
                f"window={self.window}, min_repeats={self.min_repeats}, max_repeats={self.max_repeats}"
            )

    def record(self) -> dict:
        return asdict(self)

    def settled(self, times_ms: tuple[float, ...] | list[float]) -> bool:
        """Whether these timed steps are enough under this policy: the cap reached (`max_repeats`
        steps, or `max_timed_s` of them), or at least `min_repeats` whose fastest `window` agree
        within `steady_spread`."""
        if not times_ms:
            return False
        timed = StepTimes(tuple(times_ms), self.warmup_steps, self.window)
        return (
            len(times_ms) >= self.max_repeats
            or sum(times_ms) >= 1000 * self.max_timed_s
            or (len(times_ms) >= self.min_repeats and timed.spread <= self.steady_spread)
        )

    def one_step(self) -> TimingPolicy:
        """This policy's untimed steps, then one timed step: a first look (an upper bound of the
        step time), or one round's step of an interleaved timing."""
        return dataclasses.replace(self, min_repeats=1, max_repeats=1, window=1)

    def timed_only(self) -> TimingPolicy:
        """This policy without its untimed steps: for a model already stepped at the timed shape
        (a later round of interleaved or repeated timings)."""
        return dataclasses.replace(self, warmup_steps=0)


DEFAULT_POLICY = TimingPolicy()
# One untimed step, then one timed: a first look, not a steady timing. probe_first's sweep times each
# combination so, and its race repeats only those that could still win until they are steady under
# DEFAULT_POLICY (`hpo.app.probe_first`). A single step is an upper bound of the step time (noise
# only adds time), so it can clear a combination of `slow`, never convict it: that is the steady
# proof's (`hpo.verify.timing._slow_proof`).
ONE_STEP = DEFAULT_POLICY.one_step()


@dataclass(frozen=True)
class StepTimes:
    """The timed steps (ms, in the order run), after `warmup_steps` untimed ones; `outlasted_ms`:
    the timing ended at a step stopped past its bound (`time_model`'s `stop_past_ms`) after this
    long, a lower bound of that step's time, not in `times_ms`."""

    times_ms: tuple[float, ...]
    warmup_steps: int
    window: int = DEFAULT_POLICY.window
    outlasted_ms: float | None = None

    @property
    def best_ms(self) -> float:
        return min(self.times_ms)

    @property
    def median_ms(self) -> float:
        return statistics.median(self.times_ms)

    @property
    def spread(self) -> float:
        """(slowest - fastest) / fastest of the `window` fastest steps."""
        fastest = sorted(self.times_ms)[: self.window]
        return (fastest[-1] - fastest[0]) / fastest[0] if fastest[0] > 0 else 0.0

    def record(self) -> dict:
        stopped = {} if self.outlasted_ms is None else {"outlasted_ms": self.outlasted_ms}
        return {"times_ms": list(self.times_ms), "warmup_steps": self.warmup_steps, "spread": self.spread, **stopped}


def time_steps(
    step: Callable[[], None],
    device: torch.device,
    policy: TimingPolicy = DEFAULT_POLICY,
    deadline: StepDeadline | None = None,
) -> StepTimes:
    """Time `step` (one whole training step) under `policy`: its untimed steps, then repeats. With
    `deadline`, each step stops once past its bound: an untimed one is simply over, a timed one
    ends the timing (`StepTimes.outlasted_ms`)."""
    for _ in range(policy.warmup_steps):
        _stoppable(step, deadline, time.perf_counter())
    times: list[float] = []
    while len(times) < policy.max_repeats:
        synchronize(device)
        start = time.perf_counter()
        finished = _stoppable(step, deadline, start)
        synchronize(device)
        if not finished:
            outlasted = 1000 * (time.perf_counter() - start)
            return StepTimes(tuple(times), policy.warmup_steps, policy.window, outlasted_ms=outlasted)
        times.append(1000 * (time.perf_counter() - start))
        # Past max_timed_s, even short of min_repeats: a step that slow is not made faster by
        # repeating it (noise only adds time), and on a CPU that emulates bf16 (15-40x slower)
        # three repeats per timing made one slow proof cost minutes.
        if policy.settled(times):
            break
    return StepTimes(tuple(times), policy.warmup_steps, policy.window)


def _stoppable(step: Callable[[], None], deadline: StepDeadline | None, start: float) -> bool:
    """Run `step`; False when `deadline` stopped it."""
    if deadline is None:
        step()
        return True
    try:
        with deadline.armed(start):
            step()
    except Outlasted:
        return False
    return True


def time_model(
    assembled: AssembledModel, batch: Batch, policy: TimingPolicy = DEFAULT_POLICY, stop_past_ms: float | None = None
) -> StepTimes:
    """The training steps of `assembled` on `batch` (updates included), in train mode, as it trains.
    `stop_past_ms`: a step still running after this long is stopped (`hpo.verify.timing._step_deadline`;
    never a compiled model's), for a timing that only asks whether the steps are over it."""
    moved = assembled.move(batch)
    assembled.model.train()
    counter = iter(range(1, 1_000_000))
    with deadline_for(assembled.model, stop_past_ms, compiled=assembled.knobs.compile) as deadline:
        return time_steps(lambda: timed_step(assembled, moved, next(counter)), assembled.device, policy, deadline)


def timed_step(assembled: AssembledModel, batch: Batch, step: int) -> None:
    """One training step whose time is wanted, not its loss: a non-finite loss skips the update as
    training would, and is not raised. Whether the knobs diverge is training's to judge, at the
    trial's own steps; timed steps repeat one batch at the study's learning rate."""
    try:
        run_step(assembled, batch, step)
    except NonFiniteLoss:
        pass
