"""The training loop of one trial: steps, evidence, guards, evaluation, timing."""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import torch

from hpo.config import TrialConfig
from hpo.errors import TrialRejected
from hpo.evidence.capture import capture_step
from hpo.evidence.observe import mismatches, observed_knobs
from hpo.execution.assembly import AssembledModel
from hpo.hardware.runtime import synchronize

# Called after each evaluation with (step, metrics); raises to stop the trial (e.g. optuna.TrialPruned).
EvalCallback = Callable[[int, dict[str, float]], None]


@dataclass
class TrainResult:
    metrics: dict[str, float]
    knobs_observed: dict
    step_time_ms: float
    train_samples_per_s: float
    peak_mem_mb: float
    n_params: int
    steps: int
    history: list[tuple[int, dict[str, float]]] = field(default_factory=list)


def evidence_step_index(config: TrialConfig) -> int:
    """Profile the second step when compiling (the first one compiles), else the first."""
    return min(1 if config.knobs.compile else 0, config.training.max_steps - 1)


def train(assembled: AssembledModel, config: TrialConfig, on_eval: EvalCallback | None = None) -> TrainResult:
    """Train for `max_steps`, evaluating every `eval_every`. Raises TrialRejected on divergence or a
    knob the evidence shows did not run as asked."""
    training, device = config.training, assembled.device
    batches = assembled.workload.train_batches(training.batch_size, config.seed)
    evidence_at = evidence_step_index(config)
    step_times, samples, history, observed = [], 0, [], {}
    for step in range(training.max_steps):
        batch = assembled.move(next(batches))
        synchronize(device)
        start = time.perf_counter()
        if step == evidence_at:
            with capture_step(assembled) as evidence:
                loss = _step(assembled, batch, step)
            observed = _verified(config, observed_knobs(evidence))
        else:
            loss = _step(assembled, batch, step)
        synchronize(device)
        if step > evidence_at:  # compile and profiling steps are not steady state
            step_times.append(time.perf_counter() - start)
            samples += assembled.workload.samples_in(batch)
        del loss
        if (step + 1) % training.eval_every == 0 or step + 1 == training.max_steps:
            metrics = _checked_metrics(assembled.evaluate(), step)
            history.append((step + 1, metrics))
            if on_eval is not None:
                on_eval(step + 1, metrics)
    step_s = statistics.median(step_times) if step_times else float("nan")
    per_step = samples / len(step_times) if step_times else 0
    return TrainResult(
        metrics=history[-1][1],
        knobs_observed=observed,
        step_time_ms=1000 * step_s,
        train_samples_per_s=per_step / step_s,  # the same median step as step_time_ms
        peak_mem_mb=assembled.memory.peak_mb,
        n_params=assembled.n_params,
        steps=training.max_steps,
        history=history,
    )


def _step(assembled: AssembledModel, batch, step: int) -> torch.Tensor:
    loss = assembled.forward_backward(batch)
    if not torch.isfinite(loss):
        raise TrialRejected(f"diverged: step {step}: loss is {loss.item()}")
    assembled.optimizer_step()
    assembled.check_scaler(step)
    return loss


def _verified(config: TrialConfig, observed: dict) -> dict:
    problems = mismatches(config.knobs, observed)
    if problems:
        raise TrialRejected("mismatch: " + "; ".join(problems), observed=observed)
    return observed


def _checked_metrics(metrics: dict[str, float], step: int) -> dict[str, float]:
    bad = {k: v for k, v in metrics.items() if not math.isfinite(v)}
    if bad:
        raise TrialRejected(f"diverged: step {step}: non-finite eval metrics {bad}")
    return {k: float(v) for k, v in metrics.items()}
