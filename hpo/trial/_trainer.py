"""The training loop of one trial: steps, evidence, guards, evaluation, timing, and the limits
that end it: `max_steps`, the time budget (`budget_s`), the target, and the slow check (the fastest
of the first `SLOW_CHECK_STEPS` steady steps against the reference's step, see `hpo.verify.timing._slow_limit`).

An ordinary step never waits for the device: no loss read, no synchronize. The host reads the
device only at a check boundary: every `check_every` steps, at the profiled evidence step, at the
slow check, before each evaluation, at the last step, and when the time budget or a time mark may
have been reached. There the health the steps kept on the device is read (a non-finite loss ends
the trial `diverged` at its first bad step, before anything is evaluated) and the step times are
collected (`hpo.hardware._step_timer`: CUDA events on CUDA, the host clock on CPU).

Training time (`train_s`) is the time of the training steps: fetching the batch, forward, backward
and the optimizer step, as the device ran them. The probe, model build, evaluation and the single
profiled evidence step are not training time; compilation, which happens in the first step, is: a
knob that must compile pays for it. Between boundaries the budget and the time marks are judged on
the host's clock, which never runs ahead of the device's (on CUDA a step ends on the device no
sooner than the host launched it), so a trial stops at most the few steps the host has queued
past its budget, and `train_s` is the exact figure read at that boundary."""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass

from hpo.config.trial import TrainingConfig, TrialConfig
from hpo.engine import AssembledModel, BatchStream, NonFiniteLoss, batch_stream, run_step
from hpo.errors import TrialRejected
from hpo.evidence.capture import capture_step
from hpo.evidence.observe import loader_mismatches, mismatch_verdict, mismatches, observed_knobs
from hpo.hardware import release_freed_memory, step_timer
from hpo.trial._eval_schedule import EvalSchedule
from hpo.trial._step_tally import StepTally
from hpo.verdicts import Kind, Verdict
from hpo.verify.timing import SlowLimit

# Called after each evaluation with (step, metrics); raises to stop the trial (e.g. optuna.TrialPruned).
EvalCallback = Callable[[int, dict[str, float]], None]
# Steady steps (after compilation and the profiled step) whose fastest one the slow check judges:
# noise only ever adds time, so the fastest of two is stable enough, and cheaper than more.
SLOW_CHECK_STEPS = 2


class TooSlow(TrialRejected):
    """The trial's first steady steps ran slower than the study's slow limit: a `slow` verdict."""

    def __init__(self, verdict: Verdict, observed: dict, step_ms: float):
        super().__init__(verdict, observed)
        self.step_ms = step_ms


@dataclass
class TrainResult:
    metrics: dict[str, float]
    knobs_observed: dict
    step_time_ms: float
    train_samples_per_s: float | None  # samples trained over train_s (None: no training step timed)
    peak_mem_mb: float
    n_params: int
    steps: int
    train_s: float = 0.0  # training time as defined in README ("What counts as training time")
    time_to_target_s: float | None = None  # None: no target, or not reached within the limits
    fastest_step_ms: float | None = None  # the fastest steady step; None when none ran
    steady_steps: int = 0  # steps timed after compilation and the profiled step
    evidence_s: float = 0.0  # the profiled evidence step (not training time)
    eval_s: float = 0.0  # every evaluation together (not training time)
    loader_observed: dict | None = None  # what delivered the batches (hpo.engine._loader_stream)
    data_wait_share: float | None = None  # time blocked on the next batch over training time
    steady_samples_per_s: float | None = None  # at the median steady step (None: no steady step)


def evidence_step_index(config: TrialConfig) -> int:
    """Profile the second step when compiling (the first one compiles), else the first."""
    return min(1 if config.knobs.compile else 0, config.training.max_steps - 1)


def train(
    assembled: AssembledModel, config: TrialConfig, on_eval: EvalCallback | None = None, slow: SlowLimit | None = None
) -> TrainResult:
    """Train until `max_steps`, the time budget or the target, evaluating on the schedule. Raises
    TrialRejected on divergence or a knob the evidence shows did not run as asked, and TooSlow
    when `slow` is given and the first steady steps exceed it."""
    with batch_stream(assembled.workload, config, assembled.device) as batches:
        result = _train(assembled, config, on_eval, slow, batches)
        evidence_at = evidence_step_index(config)
        result.loader_observed = batches.observed(evidence_at)
        if result.train_s > 0:
            result.data_wait_share = min(1.0, batches.wait_s(evidence_at) / result.train_s)
    return result


def _train(
    assembled: AssembledModel, config: TrialConfig, on_eval: EvalCallback | None, slow: SlowLimit | None, batches: BatchStream
) -> TrainResult:
    return _Loop(assembled, config, on_eval, slow, batches).run()


class _Loop:
    """One trial's training loop: its steps, and the checks and evaluations at its boundaries."""

    def __init__(self, assembled: AssembledModel, config: TrialConfig, on_eval, slow: SlowLimit | None, batches: BatchStream):
        self.assembled, self.config, self.on_eval, self.slow, self.batches = assembled, config, on_eval, slow, batches
        self.training = config.training
        self.evidence_at, self.schedule = evidence_step_index(config), EvalSchedule(self.training)
        self.tally, self.timer = StepTally(self.evidence_at), step_timer(assembled.device)
        self.history, self.observed, self.evidence, self.reached, self.eval_s = [], {}, None, None, 0.0

    def run(self) -> TrainResult:
        # Train mode from the first step: transformers' from_pretrained and the probe leave models in
        # eval mode, which would train without dropout until the first evaluation switched it.
        self.assembled.model.train()
        for step in range(self.training.max_steps):
            self._step(step)
            if self._at_boundary(step) and self._check(step):
                break
        return self._result(step + 1)

    def _step(self, step: int) -> None:
        """One training step, timed; the evidence step under the profiler."""
        self.timer.start()
        batch = self.assembled.move(self.batches.next_batch())
        if step == self.evidence_at:
            with capture_step(self.assembled) as self.evidence:
                run_step(self.assembled, batch, step)
        else:
            run_step(self.assembled, batch, step)
        self.timer.stop()
        self.tally.ended(step, self.assembled.workload.samples_in(batch))

    def _at_boundary(self, step: int) -> bool:
        checking_speed = self.slow is not None and step - self.evidence_at == SLOW_CHECK_STEPS
        return (
            step == self.evidence_at
            or checking_speed
            or _boundary(self.training, self.schedule, step, self.tally.train_s + self.timer.host_s)
        )

    def _check(self, step: int) -> bool:
        """A check boundary: the device is read here, and only here. Whether the trial ends here."""
        _check_health(self.assembled, step)
        self.tally.add(self.timer.read())
        if self.evidence is not None:
            self._verify_evidence()
        if self.slow is not None and len(self.tally.step_times) == SLOW_CHECK_STEPS:
            _check_speed(self.config, self.slow, 1000 * min(self.tally.step_times), self.observed)
        train_s, training = self.tally.train_s, self.training
        last = step + 1 == training.max_steps or (training.budget_s is not None and train_s >= training.budget_s)
        report = self.schedule.final(step + 1, train_s) if last else self.schedule.due(step + 1, train_s)
        return (report is not None and self._evaluate(report, step, train_s)) or last

    def _verify_evidence(self) -> None:
        self.observed = _verified(self.config, observed_knobs(self.evidence), self.batches.observed(self.evidence_at))
        self.evidence = None
        # The profiler's event buffers are freed now, but the C heap keeps freed memory for the
        # steps (`hpo.hardware._allocator`): handed back, or a CPU trial's resident set carries
        # them to its end (33 MB of the bench-vs-bare mid model's 611 MB peak).
        release_freed_memory()

    def _evaluate(self, report: int, step: int, train_s: float) -> bool:
        """Evaluate, report it under `report`; whether the target is reached (the trial ends)."""
        eval_start = time.perf_counter()
        metrics = _checked_metrics(self.assembled.evaluate(), step)
        self.eval_s += time.perf_counter() - eval_start
        self.history.append((report, metrics))
        if self.on_eval is not None:
            self.on_eval(report, metrics)
        if self.training.target is not None and self.training.target.reached(metrics):
            self.reached = train_s
            return True
        return False

    def _result(self, steps: int) -> TrainResult:
        tally, step_times = self.tally, self.tally.step_times
        step_s = statistics.median(step_times) if step_times else float("nan")
        return TrainResult(
            metrics=self.history[-1][1],
            knobs_observed=self.observed,
            step_time_ms=1000 * step_s,
            train_samples_per_s=tally.train_samples_per_s(),
            steady_samples_per_s=tally.steady_samples_per_s(),  # the same median step as step_time_ms
            peak_mem_mb=self.assembled.memory.peak_mb,
            n_params=self.assembled.n_params,
            steps=steps,
            train_s=tally.train_s,
            time_to_target_s=self.reached,
            evidence_s=tally.evidence_s,
            eval_s=self.eval_s,
            fastest_step_ms=1000 * min(step_times) if step_times else None,
            steady_steps=len(step_times),
        )


def _boundary(training: TrainingConfig, schedule: EvalSchedule, step: int, train_s: float) -> bool:
    """Whether step `step` ends at a check boundary: the check interval, the last step, an
    evaluation due, or a time budget reached by `train_s` (a lower bound of the time trained)."""
    steps = step + 1
    if steps % training.check_every == 0 or steps == training.max_steps or schedule.wants(steps, train_s):
        return True
    return training.budget_s is not None and train_s >= training.budget_s


def _check_health(assembled: AssembledModel, step: int) -> None:
    try:
        assembled.check_health(step)
    except NonFiniteLoss as exc:
        raise TrialRejected(Verdict.make(Kind.DIVERGED, str(exc))) from None


def _check_speed(config: TrialConfig, slow: SlowLimit, step_ms: float, observed: dict) -> None:
    verdict = slow.verdict(config.knobs, step_ms)
    if verdict is not None:
        raise TooSlow(verdict, observed, step_ms)


def _verified(config: TrialConfig, observed: dict, loader_observed: dict) -> dict:
    """`observed`, once neither it nor what delivered the batches contradicts the request."""
    problems = mismatches(config.knobs, observed)
    if problems:
        raise TrialRejected(mismatch_verdict(Kind.MISMATCH, problems, config.knobs), observed=observed)
    loader_problems = loader_mismatches(config.loader, loader_observed)
    if loader_problems:
        raise TrialRejected(mismatch_verdict(Kind.MISMATCH, loader_problems, config.loader), observed=observed)
    return observed


def _checked_metrics(metrics: dict[str, float], step: int) -> dict[str, float]:
    bad = {k: v for k, v in metrics.items() if not math.isfinite(v)}
    if bad:
        raise TrialRejected(Verdict.make(Kind.DIVERGED, f"step {step}: non-finite eval metrics {bad}"))
    return {k: float(v) for k, v in metrics.items()}
