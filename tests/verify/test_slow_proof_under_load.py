"""The slow proof on a simulated busy machine: thousands of proofs against a step clock that load
slows, deterministic (seeded), with no model built. Issue 48: at a load of 18-44 on 2 cores, grad
checkpointing, 1.37x the reference by a plain side-by-side loop, was judged `slow: at least 1.5x`.

The clock: a step is an amount of CPU work; the share of a CPU the process gets changes at random
moments (exponential, 300 ms apart on average, about a third of a step) to 1 / (1 + x), x
exponential with mean 0.35, so every step is inflated by what its own stretch of time brought. Ten
steps of the reference spread 1.48x from fastest to slowest at the median proof, as the plain loop
measured under the benchmark's load (648-984 ms, 1.52x). Time runs on across the steps of a proof,
untimed ones included, and a step stopped past its bound returns its time so far, as
`hpo.verify.timing._step_deadline` does."""

from __future__ import annotations

import random
from collections import Counter

import pytest

from hpo.config.trial import Knobs
from hpo.verify.timing import DEFAULT_POLICY, SlowLimit, StepTimes
from hpo.verify.timing import _side_by_side as side_by_side
from hpo.verify.timing import _slow_proof as speed
from hpo.verify.timing._side_by_side import MAX_REFERENCE_SPREAD, SideBySide

REFERENCE_WORK_MS = 700.0
LIMIT = 1.5  # the benchmark's slow_ratio
KNOBS = Knobs(precision="fp32", attention="eager", optimizer="forloop", grad_checkpointing=True)


class BusyClock:
    """Wall time on a CPU whose share for this process changes at random moments."""

    def __init__(self, seed: int, mean_stretch_ms: float = 300.0, mean_excess: float = 0.35):
        self.rng, self.mean_stretch_ms, self.mean_excess = random.Random(seed), mean_stretch_ms, mean_excess
        self.now = self.stretch_end = 0.0
        self.share = 1.0

    def step(self, work_ms: float, stop_past_ms: float | None) -> tuple[float, bool]:
        """The wall time of one step of `work_ms` CPU time, and whether it was stopped past its bound."""
        elapsed = done = 0.0
        while True:
            if self.now >= self.stretch_end:
                self.stretch_end = self.now + self.rng.expovariate(1 / self.mean_stretch_ms)
                self.share = 1 / (1 + self.rng.expovariate(1 / self.mean_excess))
            span = min(self.stretch_end - self.now, (work_ms - done) / self.share)
            if stop_past_ms is not None and elapsed + span > stop_past_ms:
                # Checked between modules: a stopped step is seen a little past its bound.
                self.now += stop_past_ms - elapsed
                return stop_past_ms * 1.01, True
            self.now, elapsed, done = self.now + span, elapsed + span, done + span * self.share
            if done >= work_ms * (1 - 1e-12):
                return elapsed, False


class Side:
    """One side's model as the proof sees it: its step's CPU work, on the shared clock."""

    def __init__(self, clock: BusyClock, work_ms: float):
        self.clock, self.work_ms = clock, work_ms

    def time(self, policy, stop_past_ms) -> StepTimes:
        for _ in range(policy.warmup_steps):
            self.clock.step(self.work_ms, stop_past_ms)
        times: list[float] = []
        while len(times) < policy.max_repeats:
            ms, stopped = self.clock.step(self.work_ms, stop_past_ms)
            if stopped:
                return StepTimes(tuple(times), policy.warmup_steps, policy.window, outlasted_ms=ms)
            times.append(ms)
        return StepTimes(tuple(times), policy.warmup_steps, policy.window)


def _busy_time_model(assembled, batch, policy=DEFAULT_POLICY, stop_past_ms=None) -> StepTimes:
    return assembled.time(policy, stop_past_ms)


def _limit() -> SlowLimit:
    return SlowLimit(reference_ms=REFERENCE_WORK_MS, ratio=LIMIT, batch_size=16)


def _proof(seed: int, cost: float) -> str:
    """One proof of a knob that costs `cost` times the reference: `slow`, `cleared` or `not judged`."""
    clock = BusyClock(seed)
    reference, knobs = Side(clock, REFERENCE_WORK_MS), Side(clock, REFERENCE_WORK_MS * cost)
    try:
        proof = speed._proven_slow(reference, knobs, None, KNOBS, _limit(), DEFAULT_POLICY)
    except speed._NotJudged:
        return "not judged"
    return "slow" if proof.verdict is not None else "cleared"


class _StoppedAtTheLimit(SideBySide):
    """The rounds as they were before the pairs (commit 9ba3546): each step of the knobs stopped at
    the limit against the reference's fastest."""

    def stop_ms(self) -> float:
        return self.over_ms()


def _proof_before(seed: int, cost: float) -> str:
    """The rule this replaced, on the same clock: slow when the knobs' fastest step was over the
    limit against the reference's fastest after every round from the third, the rounds going on
    until the reference's fastest three agreed within MAX_REFERENCE_SPREAD, or 10."""
    clock = BusyClock(seed)
    rounds = _StoppedAtTheLimit(
        Side(clock, REFERENCE_WORK_MS), Side(clock, REFERENCE_WORK_MS * cost), None, _limit(), DEFAULT_POLICY
    )
    while rounds.count < speed.PROOF_ROUNDS or not rounds.settled():
        rounds.one_round()
        if rounds.count >= speed.PROOF_ROUNDS and min(rounds.knobs.ms) <= rounds.over_ms():
            return "cleared"
    spread = StepTimes(tuple(rounds.reference_ms), 0, DEFAULT_POLICY.window).spread
    return "not judged" if spread > MAX_REFERENCE_SPREAD else "slow"


@pytest.fixture
def busy(monkeypatch):
    monkeypatch.setattr(side_by_side, "time_model", _busy_time_model)


def _outcomes(prove, cost: float, proofs: int) -> Counter:
    return Counter(prove(seed, cost) for seed in range(proofs))


@pytest.mark.usefixtures("busy")
def test_a_knob_under_the_limit_is_never_judged_slow_on_a_busy_machine():
    """1.37x against a limit of 1.5x, 2000 proofs: none slow. The rule before judged the same knob
    on the same clocks slow in about one proof in six."""
    after = _outcomes(_proof, 1.37, 2000)
    assert after["slow"] == 0, after
    assert after["cleared"] > after["not judged"], after  # mostly cleared, not merely left unjudged
    before = _outcomes(_proof_before, 1.37, 500)
    assert before["slow"] >= 40, before


@pytest.mark.usefixtures("busy")
def test_a_knob_twice_over_the_limit_is_judged_slow_on_a_busy_machine():
    """3x against a limit of 1.5x: judged slow in 994 of 1000 proofs (the other 6 not judged, none
    cleared), in 6 to 10 rounds (6.3 on average; the rule before took 3.8)."""
    after = _outcomes(_proof, 3.0, 1000)
    assert after["slow"] >= 990 and after["cleared"] == 0, after


@pytest.mark.usefixtures("busy")
def test_the_clock_is_as_noisy_as_the_benchmarks_load():
    """What the tests above rest on: ten steps of the reference spread about 1.5x from fastest to
    slowest (the plain loop measured 1.52x under the benchmark's load), in a wide range."""
    spreads = []
    for seed in range(200):
        side = Side(BusyClock(seed), REFERENCE_WORK_MS)
        times = [side.time(DEFAULT_POLICY.one_step().timed_only(), None).times_ms[0] for _ in range(10)]
        spreads.append(max(times) / min(times))
    spreads.sort()
    assert 1.3 <= spreads[100] <= 1.7 and spreads[180] > 1.6, spreads[::20]
