"""Timing knob combinations at a trial's batch, and proving which values make a trial `slow`.

A trial is judged slow from its own first steady steps (`hpo.trial.trainer`) or, in `hpo probe`,
from the probe's timed steps. Either says that the combination is slow, not which of its values is:
bf16 on a CPU without avx512_bf16 makes every combination that contains it slow, whatever the
attention or optimizer. So before a `slow` verdict is cached, the differing values are timed from
the reference one at a time, then in pairs (`hpo.verify.blame.isolate`), and only the subset that is
slow by itself is implicated. If none is, the whole combination is timed again; not slow then, the
first measurement was noise (a busy machine) and nothing is cached. Each timing is paired with a
reference step timed just before it, in three rounds (the fastest of each side), so neither a machine
busier than when the reference was first timed nor a burst of load makes a value look slow. Every
timing is a steady one (`hpo.verify.steady`): untimed steps at the timed shape first, then repeats.
When the reference's own steady steps disagree by more than MAX_REFERENCE_SPREAD, this machine
cannot tell a slow value from its own noise: nothing is judged, and the proof says why.
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

# Rounds of (reference, knobs) timings a subset must be slow in, each against the fastest of all so
# far: one round slowed by a neighbour's burst (seen: 80 ms against 17 ms) proves nothing.
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
) -> SlowProof:
    """The `slow` verdict of the smallest subset of the trial's knobs that is slow on its own at the
    trial's batch size; no verdict when not even the whole combination is slow when timed again, or
    when the reference's own steps vary too much to judge (`not_judged` says by how much).

    Each subset is compared with the reference timed just before it, in `PROOF_ROUNDS` rounds, not
    with `limit`'s stored reference time: that was measured at another moment, and a machine busier
    now than then (another worker, another job) would make every subset look slow, and the first
    one tried be cached as slow for the whole study. The reference's model is built once; each
    subset's once, for its rounds. `warm`, a model of the trial's knobs already stepped at this
    batch and free to step again (`hpo probe`'s, never a training trial's), serves the subset that
    is the whole combination, without a build or an untimed step: in a sweep, the first combination
    with an emulated bf16 is bf16 with the reference's other values, whose every step took 17 s."""
    batch = next(workload.train_batches(config.training.batch_size, config.seed))
    with _built(workload, config, REFERENCE_KNOBS, device) as reference:

        def slow(knobs: Knobs) -> Verdict | None:
            if warm is not None and knobs == warm.knobs:
                return _slow_in_every_round(reference, warm, batch, knobs, limit, policy, warm=True)
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
    warm: bool = False,
) -> Verdict | None:
    reference_steps: list[float] = []
    knobs_ms = math.inf
    timed_only = policy.timed_only()
    for round_index in range(PROOF_ROUNDS):  # a burst of load must slow every round of the knobs to count
        # Both models ran their untimed steps at this shape in the first round (a warm one before
        # the proof): later rounds only time.
        first = round_index == 0
        reference_steps += time_model(reference, batch, policy if first else timed_only).times_ms
        knobs_ms = min(knobs_ms, time_model(assembled, batch, policy if first and not warm else timed_only).best_ms)
        if knobs_ms <= min(reference_steps) * limit.ratio:
            return None
    # Slow in every round. Judged only if the reference's own steps, all rounds together, held
    # still: where even its fastest steps disagree widely, the knobs' may be slowed by the same noise.
    timed = StepTimes(tuple(reference_steps), policy.warmup_steps, policy.window)
    if timed.spread > MAX_REFERENCE_SPREAD:
        raise _NotJudged(f"reference spread {timed.spread:.0%} (over {MAX_REFERENCE_SPREAD:.0%}; steps {_ms(timed)})")
    return dataclasses.replace(limit, reference_ms=timed.best_ms).verdict(knobs, knobs_ms)


def _ms(timed: StepTimes) -> str:
    return ", ".join(f"{t:.0f}" for t in timed.times_ms) + " ms"
