"""The executor's steps for the slow check (`study.skip_slow`): the trial's slow limit, the slowdown
it records, and the proof for a trial whose first steady steps were too slow."""

from __future__ import annotations

from hpo.hardware.memory import free_memory
from hpo.records import RecordKey
from hpo.trial.run import TrialRun
from hpo.trial.trainer import TooSlow
from hpo.verdicts import Kind, Verdict
from hpo.verify.cache import reference_key, speed_key
from hpo.verify.probe_result import speed_fact
from hpo.verify.reference_knobs import REFERENCE_KNOBS
from hpo.verify.slow import SlowLimit
from hpo.verify.speed import SlowProof, prove_slow

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
    """The trial's slowdown against the reference, on the trial and, if no worker recorded one
    yet at this batch size, in the verdict cache: `hpo probe` ranks a cached combination by it
    without timing it again."""
    config, slow, step_ms = run.config, run.slow_limit, run.result.fastest_step_ms
    if step_ms is None:
        return
    slowdown = 1.0 if config.knobs == REFERENCE_KNOBS else None if slow is None else slow.slowdown(step_ms)
    run.attrs[RecordKey.SLOWDOWN] = slowdown
    if slowdown is not None:
        batch_size = config.training.batch_size
        run.verdicts.add(speed_key(run.key, batch_size), speed_fact(Verdict(Kind.OK), slowdown, step_ms, batch_size))


def slow_limit(run: TrialRun) -> SlowLimit | None:
    """The study's slow limit for this trial; None for the reference knobs themselves, or when no
    probe measured the reference's step yet (a verdict cached by an older version)."""
    config = run.config
    reference_ms = (run.verdicts.get(reference_key(config, run.device)) or {}).get("step_ms")
    if reference_ms is None or config.knobs == REFERENCE_KNOBS:
        return None
    return SlowLimit(reference_ms, config.slow_ratio, config.training.batch_size)
