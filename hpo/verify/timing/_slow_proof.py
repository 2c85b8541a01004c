"""Timing knob combinations at a trial's batch, and proving which values make a trial `slow`.

A trial is judged slow from its own first steady steps (`hpo.trial._trainer`) or, in `hpo probe`,
from the probe's timed steps. Either says that the combination is slow, not which of its values is:
bf16 on a CPU without avx512_bf16 makes every combination that contains it slow, whatever the
attention or optimizer. So before a `slow` verdict is cached, the differing values are timed from
the reference one at a time, then in pairs (`hpo.verify.fault._differential.isolate`), and only the subset that is
slow by itself is implicated. If none is, the whole combination is timed again; not slow then, the
first measurement was noise (a busy machine) and nothing is cached. The two sides are timed
interleaved, one step of each a round, the side that goes first alternating, after one untimed
step of each at the timed shape. Knobs whose fastest step is within the limit of the reference's
fastest, from the third round on (PROOF_ROUNDS), are cleared. A verdict needs more: the knobs' steps
over the limit against the reference's in so many of the pairs of steps of the rounds that noise
alone would do it by a chance of at most 0.2% (`hpo.verify.timing._pair_rank_test`: 6 rounds at the least), and
both sides steady (`hpo.verify.timing._steady`, the reference's fastest agreeing). Fastest against fastest
alone called grad checkpointing, 1.37x by a plain loop, `at least 1.5x` at a load of 40 on 2 cores:
the reference got one quiet step the knobs never got the like of. A step of the knobs is stopped
once past the limit against the reference's median step so far, with a margin
(`hpo.verify.timing._side_by_side.STOP_MARGIN`, `hpo.verify.timing._step_deadline`): an emulated bf16 MiniLM step
then costs about 7.5x the reference's instead of its full 15x at the default limit of 5x, and a
verdict on such steps says the slowdown is at least that. A proof of a slow subset so costs 6 to
10 rounds; nothing is judged, and the proof says why, when 10 rounds cannot prove it or the
reference's own steps disagree by more than MAX_REFERENCE_SPREAD.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import torch

from hpo.config.trial import Knobs, TrialConfig
from hpo.engine import AssembledModel
from hpo.hardware import seed_everything
from hpo.verdicts import Verdict
from hpo.verify.fault import REFERENCE_KNOBS, isolate
from hpo.verify.timing._pair_rank_test import Outlook, describe, outlook
from hpo.verify.timing._side_by_side import MAX_REFERENCE_SPREAD, SideBySide
from hpo.verify.timing._slow_limit import SlowLimit
from hpo.verify.timing._steady import DEFAULT_POLICY, StepTimes, TimingPolicy, time_model
from hpo.workloads.base import Batch, Workload

__all__ = ["MAX_REFERENCE_SPREAD", "SideBySideTiming", "SlowProof", "prove_slow", "time_knobs", "time_side_by_side"]

# Rounds of one step a side before a fast step of the knobs clears them: one reference step slowed
# by a neighbour's burst (seen: 80 ms against 17 ms) would otherwise clear any knobs in the first.
PROOF_ROUNDS = 3


@dataclass(frozen=True)
class SlowProof:
    """What the proof found: the `slow` verdict of the values slow on their own, or none; and when
    nothing could be judged, why (`not_judged`). With a verdict, `slowdown` is the number its text
    states (the implicated values' fastest step over the reference's fastest, timed side by side),
    a lower bound when `at_least`: the one figure a trial records beside it."""

    verdict: Verdict | None = None
    not_judged: str | None = None
    slowdown: float | None = None
    at_least: bool = False


class _NotJudged(Exception):
    pass


def time_knobs(
    workload: Workload,
    config: TrialConfig,
    knobs: Knobs,
    device: torch.device,
    batch: Batch,
    policy: TimingPolicy = DEFAULT_POLICY,
) -> StepTimes:
    """The steady steps of a fresh model under `knobs` at the trial's batch."""
    with _built(workload, config, knobs, device) as assembled:
        return time_model(assembled, batch, policy)


@contextmanager
def _built(workload: Workload, config: TrialConfig, knobs: Knobs, device: torch.device) -> Iterator[AssembledModel]:
    seed_everything(config.seed)
    yield AssembledModel(workload, knobs, config.training, device)


def time_side_by_side(
    workload: Workload, config: TrialConfig, device: torch.device, policy: TimingPolicy = DEFAULT_POLICY
) -> SideBySideTiming:
    """The steps of the trial's knobs and of the reference, each a fresh model at the trial's batch,
    timed side by side in at least PROOF_ROUNDS rounds and until both are steady, or the cap."""
    batch = next(workload.train_batches(config.training.batch_size, config.seed))
    unjudged = SlowLimit(reference_ms=math.inf, ratio=math.inf, batch_size=config.training.batch_size)
    with _built(workload, config, REFERENCE_KNOBS, device) as reference, _built(workload, config, config.knobs, device) as knobs:
        rounds = SideBySide(reference, knobs, batch, unjudged, policy)
        while rounds.count < PROOF_ROUNDS or not rounds.settled():
            rounds.one_round()
        window = policy.window
        return SideBySideTiming(StepTimes(tuple(rounds.knobs.ms), 0, window), StepTimes(tuple(rounds.reference_ms), 0, window))


@dataclass(frozen=True)
class SideBySideTiming:
    """Both sides' steps from `time_side_by_side`; `not_judged` says why they cannot be compared:
    either side's fastest steps disagree by more than MAX_REFERENCE_SPREAD (at a load of 40 on 2
    cores one knobs step read 42 ms beside reference steps of 458 ms and more, a slowdown of 0.09
    for a knob a plain loop measures at 1.4x)."""

    knobs: StepTimes
    reference: StepTimes

    @property
    def slowdown(self) -> float:
        return self.knobs.best_ms / self.reference.best_ms

    @property
    def not_judged(self) -> str | None:
        spreads = {"reference": self.reference.spread, "knobs": self.knobs.spread}
        noisy = [f"{side} spread {spread:.0%}" for side, spread in spreads.items() if spread > MAX_REFERENCE_SPREAD]
        return (
            None
            if not noisy
            else f"timed again side by side, too noisy to judge: {', '.join(noisy)} (over {MAX_REFERENCE_SPREAD:.0%})"
        )


def prove_slow(
    workload: Workload,
    config: TrialConfig,
    device: torch.device,
    limit: SlowLimit,
    policy: TimingPolicy = DEFAULT_POLICY,
    warm: AssembledModel | None = None,
    warm_timing: StepTimes | None = None,
) -> SlowProof:
    """The `slow` verdict of the smallest subset of the trial's knobs that is slow on its own at the
    trial's batch size; no verdict when not even the whole combination is slow when timed again, or
    when the reference's own steps vary too much to judge (`not_judged` says by how much).

    Each subset is compared with the reference timed beside it in every round, not with `limit`'s
    stored reference time: that was measured at another moment, and a machine busier now than then
    (another worker, another job) would make every subset look slow, and the first one tried be
    cached as slow for the whole study. The reference's model is built once; each subset's once,
    for its rounds. `warm`, a model of the trial's knobs already stepped at this batch and free to
    step again (`hpo probe`'s, never a training trial's), serves the subset that is the whole
    combination, without a build or an untimed step, and `warm_timing`, the steps just timed on it
    (after its untimed ones, perhaps stopped past the limit), are its first round's: in a sweep, the
    first combination with an emulated bf16 is bf16 with the reference's other values, whose every
    step took 17 s."""
    batch = next(workload.train_batches(config.training.batch_size, config.seed))
    with _built(workload, config, REFERENCE_KNOBS, device) as reference:
        judged: list[SlowProof] = []

        def slow(knobs: Knobs) -> Verdict | None:
            if warm is not None and knobs == warm.knobs:
                # Warm whether or not its steps were given: none of it is stepped untimed again.
                judged.append(_proven_slow(reference, warm, batch, knobs, limit, policy, warm_timing or StepTimes((), 0)))
            else:
                with _built(workload, config, knobs, device) as assembled:
                    judged.append(_proven_slow(reference, assembled, batch, knobs, limit, policy))
            return judged[-1].verdict

        try:
            verdict = isolate(config.knobs, slow)
        except _NotJudged as exc:
            return SlowProof(None, str(exc))
        return judged[-1] if verdict is not None else SlowProof()


def _proven_slow(
    reference: AssembledModel,
    assembled: AssembledModel,
    batch: Batch,
    knobs: Knobs,
    limit: SlowLimit,
    policy: TimingPolicy,
    warm_timing: StepTimes | None = None,
) -> SlowProof:
    """Rounds of one step of each side, the side that goes first alternating, each step of the knobs
    stopped STOP_MARGIN past the limit against the reference's median so far; at most the policy's
    `max_repeats` rounds. Cleared from the PROOF_ROUNDS-th round on once the knobs' fastest step is
    within the limit of the reference's fastest. A verdict once the pairs of steps prove the knobs
    over the limit beyond noise (`hpo.verify.timing._pair_rank_test`, 6 rounds at the least) and both sides are
    steady (`SideBySide.settled`); not judged, with why, when the pairs can no longer prove it or
    the reference's own fastest steps disagree. `warm_timing` not None: `assembled` is warm, and
    that timing, taken on it just now beside as many reference steps, is its first round's when it
    decides one."""
    rounds = SideBySide(reference, assembled, batch, limit, policy)
    if warm_timing is not None:
        rounds.first_with(warm_timing)
    else:
        rounds.one_round()
    if _cleared(rounds, limit, policy):
        return SlowProof()
    # Proven over the limit. Judged only if the reference's own steps held still: where even its
    # fastest steps disagree widely, the knobs' may be slowed by the same noise.
    _too_noisy(rounds.reference_ms, policy)
    fastest, at_least = rounds.knobs.fastest()
    judged = dataclasses.replace(limit, reference_ms=min(rounds.reference_ms))
    return SlowProof(judged.verdict(knobs, fastest, at_least=at_least), slowdown=judged.slowdown(fastest), at_least=at_least)


def _cleared(rounds: SideBySide, limit: SlowLimit, policy: TimingPolicy) -> bool:
    """Round after round until the knobs are cleared (True) or proven over the limit on steady
    steps (False); `_NotJudged` once the rounds can no longer prove it."""
    while True:
        # Cleared only on as many steps of each side as PROOF_ROUNDS: one reference step slowed by
        # a burst would otherwise clear any knobs in the first round.
        if rounds.count >= PROOF_ROUNDS and min(rounds.knobs.ms) <= rounds.over_ms():
            return True
        shown = outlook(rounds.knobs.ms, rounds.reference_ms, limit.ratio, policy.max_repeats)
        if shown is Outlook.UNPROVABLE:  # at the cap, whatever is not proven is unprovable
            _too_noisy(rounds.reference_ms, policy)  # the cause, where the reference's own steps disagree
            raise _NotJudged(f"not proven slow: {describe(rounds.knobs.ms, rounds.reference_ms, limit.ratio)}")
        if shown is Outlook.SLOW and rounds.settled():
            return False
        rounds.one_round()


def _too_noisy(reference_ms: list[float], policy: TimingPolicy) -> None:
    """Not judged where the reference's fastest steps disagree by more than MAX_REFERENCE_SPREAD."""
    timed = StepTimes(tuple(reference_ms), 0, policy.window)
    if timed.spread > MAX_REFERENCE_SPREAD:
        raise _NotJudged(f"reference spread {timed.spread:.0%} (over {MAX_REFERENCE_SPREAD:.0%}; steps {_ms(timed)})")


def _ms(timed: StepTimes) -> str:
    return ", ".join(f"{t:.0f}" for t in timed.times_ms) + " ms"
