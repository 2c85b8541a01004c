"""The executor's steps for the slow check (`study.skip_slow`): the trial's slow limit, the slowdown
it records, and the proof for a trial whose first steady steps were too slow."""

from __future__ import annotations

import time

from hpo.hardware.memory import free_memory
from hpo.records import RecordKey
from hpo.trial.run import TrialRun
from hpo.trial.trainer import SLOW_CHECK_STEPS, TooSlow
from hpo.verdicts import Kind, Verdict
from hpo.verify.cache import reference_key, speed_key
from hpo.verify.probe_result import speed_fact
from hpo.verify.reference_knobs import REFERENCE_KNOBS
from hpo.verify.slow import SlowLimit
from hpo.verify.slow_proof import SlowProof, prove_slow

__all__ = ["prove_too_slow", "record_speed", "slow_limit"]


def prove_too_slow(run: TrialRun, exc: TooSlow) -> SlowProof:
    """The trial's first steady steps were too slow: the `slow` verdict of the values that are slow
    on their own when timed beside the reference (`prove_slow`), cached; none when not even the
    whole combination is slow timed again (the first steps met a busy machine), or when the
    reference's own steps varied too much to judge (`SlowProof.not_judged`)."""
    limit, batch_size = run.slow_limit, run.config.training.batch_size
    slowdown = limit.slowdown(exc.step_ms)
    run.attrs.update({RecordKey.SLOWDOWN: slowdown, RecordKey.KNOBS_OBSERVED: exc.observed})
    free_memory(run.device)
    with run.phases("probe"):
        proof = prove_slow(run.workload, run.config, run.device, limit)
    if proof.verdict is not None:
        run.verdicts.add(speed_key(run.key, batch_size), speed_fact(proof.verdict, slowdown, exc.step_ms, batch_size))
    return proof


def record_speed(run: TrialRun) -> None:
    """The trial's slowdown against the reference, on the trial with how far apart the two were
    timed (`slowdown_timed_apart_s`), and, if no worker recorded one yet at this batch size, in the
    verdict cache: `hpo probe` ranks a cached combination by it
    without timing it again. A trial with fewer steady steps than the slow check judges records
    no slowdown but why (`slow_not_judged`): its one step is no speed."""
    config, slow, result = run.config, run.slow_limit, run.result
    if config.knobs == REFERENCE_KNOBS:
        slowdown = None if result.fastest_step_ms is None else 1.0
    elif slow is None:
        slowdown = None
    elif result.steady_steps < SLOW_CHECK_STEPS:
        slowdown = None
        run.attrs[RecordKey.SLOW_NOT_JUDGED] = too_few_steps(result.steady_steps, config.knobs.compile)
    else:
        slowdown = slow.slowdown(result.fastest_step_ms)
    run.attrs[RecordKey.SLOWDOWN] = slowdown
    if slowdown is not None and config.knobs != REFERENCE_KNOBS:
        timed_at = (run.verdicts.get(reference_key(config, run.device)) or {}).get("timed_at")
        run.attrs[RecordKey.SLOWDOWN_TIMED_APART_S] = None if timed_at is None else max(time.time() - timed_at, 0.0)
    if slowdown is not None:
        batch_size = config.training.batch_size
        run.verdicts.add(
            speed_key(run.key, batch_size), speed_fact(Verdict(Kind.OK), slowdown, result.fastest_step_ms, batch_size)
        )


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
