"""AvoidKnownFailures: no known-bad value or pair is proposed again, by any sampler, at the plain
sampler's cost; an empty part blocks nothing; reseeding reseeds the wrapper too."""

from __future__ import annotations

import math
import random

import optuna
import pytest
from optuna.trial import TrialState, create_trial

from hpo.bench.avoidance import run_avoidance
from hpo.study.avoid import AvoidKnownFailures, known_bad_parts

optuna.logging.set_verbosity(optuna.logging.WARNING)


@pytest.mark.parametrize("sampler", ["tpe", "random", "cmaes", "nsga2", "gp"])
def test_no_sampler_proposes_a_known_failure_again_and_redraws_nothing(sampler):
    trials = 20 if sampler == "gp" else 30  # GP's fit is the slow part; 20 trials still revisit failures unwrapped
    wrapped = run_avoidance(sampler, wrapped=True, n_trials=trials)
    assert wrapped.known_bad_proposals == 0
    assert wrapped.sample_relative_calls == trials  # mended, never redrawn: the base sampler is asked once a trial


def test_the_plain_samplers_do_propose_known_failures_again():
    """The benchmark's failures are real ones to avoid: without the wrapper they come back."""
    assert run_avoidance("tpe", wrapped=False).known_bad_proposals > 0
    assert run_avoidance("random", wrapped=False).known_bad_proposals > 0


def _study_with(attrs_list) -> optuna.Study:
    study = optuna.create_study()
    dist = {"attention": optuna.distributions.CategoricalDistribution(["eager", "sdpa"])}
    for i, attrs in enumerate(attrs_list):
        params = {"attention": "eager" if i % 2 == 0 else "sdpa"}
        study.add_trial(
            create_trial(state=TrialState.COMPLETE, value=math.inf, params=params, distributions=dist, user_attrs=attrs)
        )
    return study


def test_parts_come_from_avoidable_verdicts_and_an_empty_part_is_dropped():
    study = _study_with([
        {"verdict": "incompatible: attention=eager: boom", "verdict_implicates": [["attention", "eager"]]},
        {"verdict": "slow: 9.0x", "verdict_implicates": []},  # only training params differed: nothing to avoid
        {"verdict": "diverged: step 3: loss is nan", "verdict_implicates": [["attention", "eager"]]},  # not avoidable
    ])  # fmt: skip
    assert known_bad_parts(study) == {(("attention", "eager"),)}


def test_trials_recorded_before_implicated_parts_avoid_their_whole_knob_combination():
    # Trial 0 ran attention=eager (its only searched knob); precision was fixed, so not a param.
    study = _study_with([{"verdict": "slow: 9x", "knobs_requested": {"attention": "eager", "precision": "fp32"}}])
    assert known_bad_parts(study) == {(("attention", "eager"),)}


def test_reseed_rng_reseeds_the_wrappers_own_generator(monkeypatch):
    wrapper = AvoidKnownFailures(optuna.samplers.RandomSampler(seed=0), seed=0)
    before = wrapper._rng.getstate()
    wrapper.reseed_rng()
    assert wrapper._rng.getstate() != before and isinstance(wrapper._rng, random.Random)
