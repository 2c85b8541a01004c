"""Timing knob combinations at a trial's batch, and proving which values make a trial `slow`.

A trial is judged slow from its own first steady steps (`hpo.trial.trainer`) or, in `hpo probe`,
from the probe's timed steps. Either says that the combination is slow, not which of its values is:
bf16 on a CPU without avx512_bf16 makes every combination that contains it slow, whatever the
attention or optimizer. So before a `slow` verdict is cached, the differing values are timed from
the reference one at a time, then in pairs (`hpo.verify.blame.isolate`), and only the subset that is
slow by itself is implicated. If none is, the whole combination is timed again; not slow then, the
first measurement was noise (a busy machine) and nothing is cached. The two sides are timed
interleaved, a steady timing of the reference (the fast side) then one step of the knobs a round,
for at least three rounds and until the knobs' steps are steady too (`hpo.verify.steady`: untimed
steps at the timed shape first, then repeats until the fastest agree, or a cap): the values are
slow only if the knobs' fastest step is over the limit against the reference's fastest after every
round, so neither a machine busier than when the reference was first timed nor a burst of load
makes a value look slow. A burst would have to slow every step of the knobs and spare the
reference's timings between them. A step of the knobs is stopped once it has run past the limit
against the reference's fastest so far (`hpo.verify.step_deadline`): its time is then known to be
over the limit, which is all a round asks, and an emulated bf16 MiniLM step (17 s on an AVX2 core)
costs 5x the reference's 1.1 s instead; a verdict on such steps says the slowdown is at least
that. When the reference's own steps disagree by more than MAX_REFERENCE_SPREAD, this machine cannot
tell a slow value from its own noise: nothing is judged, and the proof says why.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import torch

from hpo.config.trial import Knobs, TrialConfig
from hpo.engine.assembly import AssembledModel
from hpo.hardware.runtime import seed_everything
from hpo.verdicts import Verdict
from hpo.verify.blame import isolate
from hpo.verify.reference_knobs import REFERENCE_KNOBS
from hpo.verify.slow import SlowLimit
from hpo.verify.steady import DEFAULT_POLICY, StepTimes, TimingPolicy, time_model
from hpo.workloads.base import Batch, Workload

__all__ = ["MAX_REFERENCE_SPREAD", "SlowProof", "prove_slow", "time_knobs"]

# Rounds of (reference timing, knobs step) a subset must be slow in, each against the fastest of
# all so far: one round slowed by a neighbour's burst (seen: 80 ms against 17 ms) proves nothing.
# One step of the knobs a round, not a steady timing: that cost 9 steps of an emulated fp16 (257 ms
# each on the quickstart) where 3 interleaved with the reference's prove as much.
PROOF_ROUNDS = 3
# A reference whose steady steps spread wider than this is too noisy to judge a slowdown against.
MAX_REFERENCE_SPREAD = 0.25


@dataclass(frozen=True)
class SlowProof:
    """What the proof found: the `slow` verdict of the values slow on their own, or none; and when
    nothing could be judged, why (`not_judged`)."""

    verdict: Verdict | None = None
    not_judged: str | None = None


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

        def slow(knobs: Knobs) -> Verdict | None:
            if warm is not None and knobs == warm.knobs:
                # Warm whether or not its steps were given: none of it is stepped untimed again.
                return _slow_in_every_round(reference, warm, batch, knobs, limit, policy, warm_timing or StepTimes((), 0))
            with _built(workload, config, knobs, device) as assembled:
                return _slow_in_every_round(reference, assembled, batch, knobs, limit, policy)

        try:
            return SlowProof(isolate(config.knobs, slow))
        except _NotJudged as exc:
            return SlowProof(None, str(exc))


def _slow_in_every_round(
    reference: AssembledModel,
    assembled: AssembledModel,
    batch: Batch,
    knobs: Knobs,
    limit: SlowLimit,
    policy: TimingPolicy,
    warm_timing: StepTimes | None = None,
) -> Verdict | None:
    """Rounds of a steady timing of the reference then one step of `knobs`, at least PROOF_ROUNDS
    and until the knobs' steps are steady under `policy`; a verdict only if the knobs were over the
    limit after every round. Each step of the knobs stops once past the limit (its time is then a
    lower bound, over the limit). `warm_timing` not None: `assembled` is warm, and that timing,
    taken on it just now, is its first round's."""
    one_step = policy.one_step()
    # The reference's first timing is steady however long its step: its fastest steps are what the
    # spread check reads, and under max_timed_s a 1.2 s MiniLM reference step on an AVX2 core was
    # timed once a round, each after a stopped bf16 step (1268, 1370, 1724 ms: 36%, not judged).
    steady_reference = dataclasses.replace(policy, max_timed_s=math.inf)
    reference_steps: list[float] = []
    knobs_steps = _KnobsSteps()
    rounds = 0
    while rounds < PROOF_ROUNDS or not policy.settled(knobs_steps.ms):
        first = rounds == 0
        # The reference is the fast side: a steady timing of it every round costs little beside one
        # step of slow knobs, and its fastest steps come from a run of steps, not from the single
        # step after a long one (on CI a 2 ms reference step read 25% apart after each 250 ms one).
        reference_steps += time_model(reference, batch, steady_reference if first else policy.timed_only()).times_ms
        over_ms = min(reference_steps) * limit.ratio
        if first and warm_timing is not None and _decides(warm_timing, over_ms):
            knobs_steps.add(warm_timing)  # the first round's steps of a warm model are those given
        else:
            step = one_step if first and warm_timing is None else one_step.timed_only()
            knobs_steps.add(time_model(assembled, batch, step, stop_past_ms=over_ms))
        rounds += 1
        if min(knobs_steps.ms) <= over_ms:
            return None
    # Slow in every round. Judged only if the reference's own steps, all rounds together, held
    # still: where even its fastest steps disagree widely, the knobs' may be slowed by the same noise.
    timed = StepTimes(tuple(reference_steps), policy.warmup_steps, policy.window)
    if timed.spread > MAX_REFERENCE_SPREAD:
        raise _NotJudged(f"reference spread {timed.spread:.0%} (over {MAX_REFERENCE_SPREAD:.0%}; steps {_ms(timed)})")
    fastest, at_least = knobs_steps.fastest()
    return dataclasses.replace(limit, reference_ms=timed.best_ms).verdict(knobs, fastest, at_least=at_least)


def _decides(timing: StepTimes, over_ms: float) -> bool:
    """Whether a timing taken before this round can stand for its step of the knobs: whole steps
    can, and a step stopped past `over_ms`. No steps (a warm model handed on untimed) cannot, nor
    a step stopped short of `over_ms` (`hpo probe` stops against the stored reference time, which
    can be below the reference's time now): it only shows the step ran that long."""
    return bool(timing.times_ms) or (timing.outlasted_ms is not None and timing.outlasted_ms > over_ms)


@dataclass
class _KnobsSteps:
    """The knobs' steps across the rounds (ms): whole steps, and steps stopped past the limit, whose
    time is only known to be at least that."""

    ms: list[float] = dataclasses.field(default_factory=list)
    stopped: list[bool] = dataclasses.field(default_factory=list)

    def add(self, timing: StepTimes) -> None:
        self.ms += timing.times_ms
        self.stopped += [False] * len(timing.times_ms)
        if timing.outlasted_ms is not None:
            self.ms.append(timing.outlasted_ms)
            self.stopped.append(True)

    def fastest(self) -> tuple[float, bool]:
        """The fastest step, and whether it was stopped (its time a lower bound)."""
        i = min(range(len(self.ms)), key=self.ms.__getitem__)
        return self.ms[i], self.stopped[i]


def _ms(timed: StepTimes) -> str:
    return ", ".join(f"{t:.0f}" for t in timed.times_ms) + " ms"
