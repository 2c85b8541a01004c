"""What a probe times: the fp32/eager reference's step time at the trial's batch, measured once and
stored for every later trial of the model, and, in a timed probe (`hpo probe`, the Lightning path),
the trial's own steady steps, judged `slow` only by the side-by-side proof."""

from __future__ import annotations

import torch

from hpo.config.trial import TrialConfig
from hpo.engine import AssembledModel
from hpo.hardware import free_memory, is_out_of_memory
from hpo.verify.peaks import reference_over_limit
from hpo.verify.probing._compared_step import ComparedSteps
from hpo.verify.probing._result import ProbeResult
from hpo.verify.stored import VerdictStore, reference_key
from hpo.verify.timing import SlowLimit, SlowProof, StepTimes, TimingPolicy, prove_slow, time_model, time_reference
from hpo.workloads.base import Batch

__all__ = ["time_trial", "timed_reference"]


def timed_reference(
    result: ProbeResult,
    reference: AssembledModel,
    batch: Batch,
    growth: int,
    samples: int,
    config: TrialConfig,
    store: VerdictStore,
) -> float | None:
    """The reference's step time at the trial's batch, stored for every later trial; None when the
    reference (fp32, eager attention, no checkpointing) does not fit at that batch where the
    trial's knobs may: its out of memory is no fact about the trial's knobs, so the trial goes on
    with its speed not judged, and says why. On the H200 a bf16 trial at batch 256 of a 152.7M GPT
    was recorded `oom` this way, by the reference's 125 GB. Under a memory limit it is timed only
    when its own peak model predicts it fits (`hpo.verify.peaks._reference_fit`)."""
    over = reference_over_limit(reference, config, store)
    if over is not None:
        result.slow_not_judged = over
        return None
    try:
        timing = time_reference(reference, batch, growth, samples)
    except (torch.OutOfMemoryError, RuntimeError) as exc:
        if not is_out_of_memory(exc):  # torch's CPU allocator's failure (under the cap) is a RuntimeError
            raise
        why = (str(exc).splitlines() or [""])[0][:120]
    else:
        store.put(reference_key(config, reference.device), timing.record())
        return timing.step_ms
    free_memory(reference.device)  # here, not in the except: its traceback held the step's tensors
    result.slow_not_judged = (
        f"the fp32/eager reference does not fit at batch {config.training.batch_size} ({why}): "
        "nothing to judge this trial's speed against"
    )
    return None


def time_trial(
    result: ProbeResult,
    trial: AssembledModel,
    steps: ComparedSteps,
    batch: Batch,
    config: TrialConfig,
    reference_ms: float,
    policy: TimingPolicy,
) -> None:
    """Time the trial's steps at its batch into `result`: its fastest step and slowdown, and a `slow`
    verdict where the steps are over the limit and the proof (`prove_slow`, handed the model and the
    steps just timed) finds the values slow on their own."""
    limit = SlowLimit(reference_ms, config.slow_ratio, config.training.batch_size)
    # Past the limit a step's time only feeds the proof, which asks no more than "over the limit":
    # an emulated bf16 MiniLM step is stopped at 5.5 s of its 17.
    over_ms = reference_ms * limit.ratio if config.skip_slow else None
    timed = time_model(trial, batch, policy, stop_past_ms=over_ms)
    proof = SlowProof()
    if timed.outlasted_ms is not None or (config.skip_slow and limit.verdict(config.knobs, timed.best_ms) is not None):
        proof, timed = _judged_slow(result, trial, steps, batch, config, limit, timed, policy)
    # A step timed again whole after the proof (`_judged_slow`) is stopped no more.
    stopped = timed.outlasted_ms is not None
    result.trial_step_stopped = stopped
    result.trial_step_ms = timed.outlasted_ms if stopped else timed.best_ms
    result.trial_steps_ms = list(timed.times_ms)
    # A verdict's slowdown is the one its text states, timed beside the reference.
    result.slowdown = proof.slowdown if result.slow is not None else limit.slowdown(result.trial_step_ms)


def _judged_slow(
    result: ProbeResult,
    trial: AssembledModel,
    steps: ComparedSteps,
    batch: Batch,
    config: TrialConfig,
    limit: SlowLimit,
    timed: StepTimes,
    policy: TimingPolicy,
) -> tuple[SlowProof, StepTimes]:
    """Steps over the limit judged by the proof, its verdict into `result`; the proof and the
    trial's step times, timed again whole when a stopped step was not proven slow."""
    # The trial's model, timed just now and handed on to nothing, is warm for the proof, and the
    # steps just timed are the proof's first of the knobs.
    proof = prove_slow(steps.workload, config, steps.device, limit, warm=trial, warm_timing=timed)
    result.slow, result.slow_not_judged = proof.verdict, proof.not_judged
    if timed.outlasted_ms is not None and proof.verdict is None:
        # Not proven slow (the reference is slower now than when it was stored, or too noisy
        # to judge against): a stopped step is no step time, so the knobs' own is taken whole.
        timed = time_model(trial, batch, policy.timed_only())
    return proof, timed
