"""Two models timed side by side at one batch: the fp32/eager reference and a knob combination, one
step of each a round, the side that goes first alternating, so that both get as many steps and are
judged by the same statistic (the fastest: noise on a shared machine only adds time). The slow proof
(`hpo.verify.timing._slow_proof`) judges its rounds against a limit; a trial whose recorded slowdown is
implausibly low times the two again here (`hpo.trial._slowdown`)."""

from __future__ import annotations

import dataclasses
import math
import statistics
from dataclasses import dataclass

from hpo.engine import AssembledModel
from hpo.verify.timing._slow_limit import SlowLimit
from hpo.verify.timing._steady import StepTimes, TimingPolicy, time_model
from hpo.workloads.base import Batch

__all__ = ["MAX_REFERENCE_SPREAD", "STOP_MARGIN", "KnobsSteps", "SideBySide", "decides"]

# A reference whose fastest steps spread wider than this is too noisy to judge a slowdown against.
MAX_REFERENCE_SPREAD = 0.25
# A step of the knobs is stopped this far past the limit against the reference's median step so far:
# a stopped step counts against a reference step only when already over the limit against it
# (`hpo.verify.timing._pair_rank_test`), and a reference step still to come may be slower than those before. On a
# simulated busy machine, stopped at the limit against the slowest so far, about half the proofs of a 3x
# knob ended unproven; at 1.5x past the median, 6 in 1000 (`tests/verify/test_slow_proof_under_load.py`).
# The median, not the slowest: one reference step slowed by a burst would let every later step of a
# slow knob run whole.
STOP_MARGIN = 1.5


class SideBySide:
    """The interleaved steps of the reference and the knobs: as many of one as of the other, judged
    by the same statistic (the fastest), so that neither side gets more chances at a quiet moment.
    With a steady timing of the reference beside one step of the knobs a round, a Mamba trial with
    checkpointing was judged 6.3x the reference where a plain side-by-side loop measured 1.6-2.1x."""

    def __init__(
        self, reference: AssembledModel, assembled: AssembledModel, batch: Batch, limit: SlowLimit, policy: TimingPolicy
    ):
        self.reference, self.assembled, self.batch, self.limit, self.policy = reference, assembled, batch, limit, policy
        self.reference_ms: list[float] = []
        self.knobs = KnobsSteps()
        self.count = 0
        self.warmed = False  # both sides have run their untimed steps

    def over_ms(self) -> float:
        """The limit the knobs' fastest step is cleared against: `ratio` times the reference's
        fastest step so far."""
        return min(self.reference_ms) * self.limit.ratio

    def stop_ms(self) -> float:
        """How long a step of the knobs may run: STOP_MARGIN past `ratio` times the reference's
        median step so far, so that a stopped step is over the limit against most steps of the
        reference, later ones included."""
        return statistics.median(self.reference_ms) * self.limit.ratio * STOP_MARGIN

    def first_with(self, warm_timing: StepTimes) -> None:
        """A warm model's timing as the first round, beside as many reference steps (the first
        after the reference's untimed ones); the knobs' model is warm either way. A timing that
        cannot stand for a step against the reference now (`decides`) leaves the round's step of
        the knobs still to run."""
        steps = max(len(warm_timing.times_ms) + (warm_timing.outlasted_ms is not None), 1)
        self.reference_ms += time_model(self.reference, self.batch, self._policy(untimed=True)).times_ms
        for _ in range(steps - 1):
            self.reference_ms += time_model(self.reference, self.batch, self._policy(untimed=False)).times_ms
        self.warmed = True
        if decides(warm_timing, self.over_ms()):
            self.knobs.add(warm_timing)
        else:
            self.knobs.add(self._time_knobs(untimed=False))
        self.count = 1

    def one_round(self) -> None:
        untimed, self.warmed = not self.warmed, True
        if self.count % 2 == 0:
            self.reference_ms += time_model(self.reference, self.batch, self._policy(untimed)).times_ms
            self.knobs.add(self._time_knobs(untimed))
        else:
            self.knobs.add(self._time_knobs(untimed))
            self.reference_ms += time_model(self.reference, self.batch, self._policy(untimed)).times_ms
        self.count += 1

    def _time_knobs(self, untimed: bool) -> StepTimes:
        stop_ms = self.stop_ms()
        return time_model(
            self.assembled, self.batch, self._policy(untimed), stop_past_ms=stop_ms if math.isfinite(stop_ms) else None
        )

    def _policy(self, untimed: bool) -> TimingPolicy:
        one_step = self.policy.one_step()
        return one_step if untimed else one_step.timed_only()

    def settled(self) -> bool:
        """Both sides steady: the knobs' steps under the policy (a step past its time cap is timed
        once), the reference's fastest within MAX_REFERENCE_SPREAD; or the policy's cap of rounds,
        after which a reference still that uneven is not judged."""
        if self.count >= self.policy.max_repeats:
            return True
        spread = StepTimes(tuple(self.reference_ms), 0, self.policy.window).spread
        return self.policy.settled(self.knobs.ms) and spread <= MAX_REFERENCE_SPREAD


def decides(timing: StepTimes, over_ms: float) -> bool:
    """Whether a timing taken before this round can stand for its step of the knobs: whole steps
    can, and a step stopped past `over_ms`. No steps (a warm model handed on untimed) cannot, nor
    a step stopped short of `over_ms` (`hpo probe` stops against the stored reference time, which
    can be below the reference's time now): it only shows the step ran that long."""
    return bool(timing.times_ms) or (timing.outlasted_ms is not None and timing.outlasted_ms > over_ms)


@dataclass
class KnobsSteps:
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
