"""The executor's steps for the slow check (`study.skip_slow`): the trial's slow limit, the slowdown
it records, and the proof for a trial whose first steady steps were too slow."""

from __future__ import annotations

import time

from hpo.hardware import free_memory
from hpo.records import RecordKey
from hpo.trial._run import TrialRun
from hpo.trial._trainer import SLOW_CHECK_STEPS, TooSlow
from hpo.verdicts import Kind, Verdict
from hpo.verify.fault import REFERENCE_KNOBS
from hpo.verify.probing import speed_fact
from hpo.verify.stored import reference_key, speed_key
from hpo.verify.timing import SlowLimit, SlowProof, prove_slow, time_side_by_side

__all__ = ["RETIME_BELOW", "prove_too_slow", "record_speed", "slow_limit"]

# A slowdown this low against the stored reference time is timed again side by side before it is
# recorded. bf16 with fused AdamW on an avx512_bf16 CPU reads 0.31-0.42 (FINDINGS.md), so this
# re-times those trials too (a few steps of each side, once per combination and batch: the speed
# fact it leaves is reused), and catches a reference timed on a busy moment.
RETIME_BELOW = 0.5
# A reference step faster than the stored one by this factor replaces it; within it, noise.
REFERENCE_FASTER_BY = 1.2


def prove_too_slow(run: TrialRun, exc: TooSlow) -> SlowProof:
    """The trial's first steady steps were too slow: the `slow` verdict of the values that are slow
    on their own when timed beside the reference (`prove_slow`), cached; none when not even the
    whole combination is slow timed again (the first steps met a busy machine), or when the
    reference's own steps varied too much to judge (`SlowProof.not_judged`)."""
    limit, batch_size = run.slow_limit, run.config.training.batch_size
    run.attrs[RecordKey.KNOBS_OBSERVED] = exc.observed
    free_memory(run.device)
    with run.phases("probe"):
        proof = prove_slow(run.workload, run.config, run.device, limit)
    if proof.verdict is not None:
        # The verdict's own number, timed beside the reference: the first steps' ratio to the stored
        # reference time is what sent the trial to the proof, not what the proof found.
        run.attrs[RecordKey.SLOWDOWN] = proof.slowdown
        run.verdicts.add(speed_key(run.key, batch_size), speed_fact(proof.verdict, proof.slowdown, exc.step_ms, batch_size))
    return proof


def record_speed(run: TrialRun) -> None:
    """The trial's slowdown against the reference, on the trial with how far apart the two were
    timed (`slowdown_timed_apart_s`), and, if no worker recorded one yet at this batch size, in the
    verdict cache: `hpo probe` ranks a cached combination by it
    without timing it again. A trial with fewer steady steps than the slow check judges records
    no slowdown but why (`slow_not_judged`): its one step is no speed."""
    config, result = run.config, run.result
    slowdown = _slowdown(run)
    if config.knobs == REFERENCE_KNOBS and result.fastest_step_ms is not None:
        _faster_reference(run, result.fastest_step_ms, "the reference knobs' own training steps")
    run.attrs[RecordKey.SLOWDOWN] = slowdown
    if slowdown is not None and config.knobs != REFERENCE_KNOBS:
        timed_at = (run.verdicts.get(reference_key(config, run.device)) or {}).get("timed_at")
        run.attrs[RecordKey.SLOWDOWN_TIMED_APART_S] = None if timed_at is None else max(time.time() - timed_at, 0.0)
    if slowdown is not None:
        batch_size = config.training.batch_size
        run.verdicts.add(
            speed_key(run.key, batch_size), speed_fact(Verdict(Kind.OK), slowdown, result.fastest_step_ms, batch_size)
        )


def _slowdown(run: TrialRun) -> float | None:
    """The trial's slowdown against the reference: 1 for the reference knobs themselves; timed again
    side by side when implausibly low; None, with why, when its steady steps are too few."""
    config, slow, result = run.config, run.slow_limit, run.result
    if config.knobs == REFERENCE_KNOBS:
        return None if result.fastest_step_ms is None else 1.0
    if slow is None:
        return None
    if result.steady_steps < SLOW_CHECK_STEPS:
        run.attrs[RecordKey.SLOW_NOT_JUDGED] = too_few_steps(result.steady_steps, config.knobs.compile)
        return None
    slowdown = slow.slowdown(result.fastest_step_ms)
    return _timed_again(run, slow) if slowdown < RETIME_BELOW else slowdown


def _timed_again(run: TrialRun, slow: SlowLimit) -> float | None:
    """The trial's slowdown timed side by side with the reference, for a slowdown against the
    stored reference time that is implausibly low: that time was likely taken on a busier machine
    (an EfficientNet study stored 5336 ms where its own knobs trained at 807 ms, and every later
    trial read 0.02-0.06). A faster reference step replaces the stored one. None, with why in
    `slow_not_judged`, when either side's steps were too uneven to compare."""
    free_memory(run.device)
    with run.phases("probe"):
        timed = time_side_by_side(run.workload, run.config, run.device)
    run.attrs[RecordKey.SLOWDOWN_TIMED_AGAIN] = {
        "stored_reference_ms": slow.reference_ms,
        "slowdown_against_stored": slow.slowdown(run.result.fastest_step_ms),
        "reference_ms": timed.reference.best_ms,
        "step_ms": timed.knobs.best_ms,
        "reference_steps_ms": list(timed.reference.times_ms),
        "steps_ms": list(timed.knobs.times_ms),
    }
    if timed.not_judged is not None:
        run.attrs[RecordKey.SLOW_NOT_JUDGED] = timed.not_judged
        return None
    _faster_reference(run, timed.reference.best_ms, "timed again beside a trial")
    return timed.slowdown


def _faster_reference(run: TrialRun, step_ms: float, source: str) -> None:
    """Keep `step_ms` as the reference's step time where it is faster than the stored one by more
    than noise: noise only adds time, so the fastest timing of the reference knobs is its speed."""
    key = reference_key(run.config, run.device)
    stored = run.verdicts.get(key) or {}
    if stored.get("step_ms") is not None and step_ms * REFERENCE_FASTER_BY < stored["step_ms"]:
        run.verdicts.put(key, {**stored, "step_ms": step_ms, "timed_at": time.time(), "replaced_by": source})


def too_few_steps(steady: int, compiled: bool) -> str:
    """Why a trial's speed was not judged: it timed fewer steady steps than the slow check reads."""
    unsteady = "the compiling and the profiled step" if compiled else "the profiled step"
    return (
        f"too few steps to judge speed: {steady} steady step(s) timed after {unsteady}, the slow check needs "
        f"{SLOW_CHECK_STEPS}; raise max_steps or budget_s"
    )


def slow_limit(run: TrialRun) -> SlowLimit | None:
    """The study's slow limit for this trial; None for the reference knobs themselves, or when no
    probe measured the reference's step yet (a verdict cached by an older version)."""
    config = run.config
    reference_ms = (run.verdicts.get(reference_key(config, run.device)) or {}).get("step_ms")
    if reference_ms is None or config.knobs == REFERENCE_KNOBS:
        return None
    return SlowLimit(reference_ms, config.slow_ratio, config.training.batch_size)
