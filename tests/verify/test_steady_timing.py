"""The one timing policy (`hpo.verify.timing._steady`): untimed steps first, then repeats until the fastest
agree or a cap is reached; one slow step never ends a timing, and never is the speed."""

from __future__ import annotations

import time

import pytest
import torch

from hpo.verify.timing._steady import StepTimes, TimingPolicy, time_steps

CPU = torch.device("cpu")


def scripted(durations_s: list[float]):
    """A step that sleeps each of `durations_s` in turn (then the last one forever); its calls."""
    calls = []

    def step() -> None:
        calls.append(len(calls))
        time.sleep(durations_s[min(len(calls) - 1, len(durations_s) - 1)])

    return step, calls


def test_the_first_call_is_untimed_and_a_slow_step_does_not_end_the_timing():
    # A plan built on the first call (0.5 s), then steady 20 ms steps with one 200 ms hiccup.
    step, calls = scripted([0.5, 0.02, 0.2, 0.02, 0.02])
    timed = time_steps(step, CPU, TimingPolicy(warmup_steps=1, min_repeats=3, window=3, steady_spread=0.5))
    assert len(calls) == 1 + len(timed.times_ms) and timed.warmup_steps == 1
    assert max(timed.times_ms) < 450  # the first call was never timed
    assert len(timed.times_ms) >= 4  # the hiccup did not end it: repeated until three fast steps agreed
    assert timed.best_ms < 100 and timed.spread <= 0.5


def test_a_machine_that_never_settles_is_timed_up_to_the_cap():
    step, calls = scripted([0.001, 0.03, 0.001, 0.03, 0.012, 0.03, 0.006])
    policy = TimingPolicy(warmup_steps=0, min_repeats=3, max_repeats=6, window=3, steady_spread=0.01)
    timed = time_steps(step, CPU, policy)
    assert len(timed.times_ms) == policy.max_repeats == len(calls)


def test_spread_is_taken_over_the_fastest_steps():
    timed = StepTimes((10.0, 50.0, 11.0, 10.5), warmup_steps=1, window=3)
    assert timed.best_ms == 10.0 and timed.spread == pytest.approx(0.1)


def test_a_policy_that_cannot_judge_steadiness_is_refused():
    with pytest.raises(ValueError, match="window <= min_repeats"):
        TimingPolicy(min_repeats=2, window=3)


def test_a_step_longer_than_the_timed_cap_is_timed_once():
    """Noise only adds time: a step past `max_timed_s` is not repeated to min_repeats (an emulated
    bf16 step on an AVX2 CPU took tens of seconds, three times per timing)."""
    step, calls = scripted([0.0, 0.15])
    timed = time_steps(step, CPU, TimingPolicy(warmup_steps=1, min_repeats=3, max_timed_s=0.1))
    assert len(timed.times_ms) == 1 and len(calls) == 2 and timed.best_ms >= 150


def test_the_default_policy_leaves_a_first_call_untimed():
    """What the probe, the slow proof and probe_first time with when they name no policy: a first
    call (cuDNN attention builds its plan there) is one untimed step, never a timed one."""
    step, calls = scripted([0.3, 0.01])
    timed = time_steps(step, CPU)  # DEFAULT_POLICY, as every caller that names none
    assert timed.warmup_steps == 1 and len(calls) == 1 + len(timed.times_ms)
    assert max(timed.times_ms) < 150  # the 300 ms first call is in no timed step
