"""AvoidKnownFailures: no known-bad value or pair is proposed again, by any sampler, at the plain
sampler's cost; an empty part blocks nothing; reseeding reseeds the wrapper too."""

from __future__ import annotations

import math

import optuna
import pytest
from optuna.trial import TrialState, create_trial

from benchmarks.avoidance import run_avoidance
from hpo.study._avoid import AvoidKnownFailures, known_bad_parts

optuna.logging.set_verbosity(optuna.logging.WARNING)


@pytest.mark.slow
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


class _AlwaysFirstChoice(optuna.samplers.RandomSampler):
    """A base sampler that proposes a categorical's first choice and whose reseed changes nothing,
    so whatever varies between two wrappers around it comes from the wrapper's own generator."""

    def sample_independent(self, study, trial, param_name, param_distribution):
        return param_distribution.choices[0]

    def reseed_rng(self) -> None:
        pass


def _mended_choices(wrapper: AvoidKnownFailures, n: int = 20) -> list[str]:
    """What the wrapper picks instead of a known-bad first choice, over `n` trials."""
    study = optuna.create_study(sampler=wrapper)
    choices = ["bad", *(f"ok{i}" for i in range(8))]
    bad = {"verdict": "incompatible: attention=bad: boom", "verdict_implicates": [["attention", "bad"]]}
    dist = {"attention": optuna.distributions.CategoricalDistribution(choices)}
    study.add_trial(
        create_trial(state=TrialState.COMPLETE, value=math.inf, params={"attention": "bad"}, distributions=dist, user_attrs=bad)
    )
    picked = []
    for _ in range(n):
        trial = study.ask()
        picked.append(trial.suggest_categorical("attention", choices))
        study.tell(trial, 1.0)
    return picked


def test_reseed_rng_reseeds_the_wrappers_own_generator():
    """Optuna reseeds each thread's sampler (n_jobs > 1) so parallel trials differ: two wrappers
    seeded alike mend known failures alike until reseeded, and differently after."""
    twins = [AvoidKnownFailures(_AlwaysFirstChoice(), seed=0) for _ in range(2)]
    first, second = (_mended_choices(wrapper) for wrapper in twins)
    assert first == second and "bad" not in first
    for wrapper in twins:
        wrapper.reseed_rng()
    first, second = (_mended_choices(wrapper) for wrapper in twins)
    assert first != second  # 20 picks among 8: equal by chance once in 8**20


def _slow_bf16_at_batch_8(study: optuna.Study) -> None:
    from hpo.verify.stored import StudyVerdicts

    implicates = [["batch_size", 8], ["precision", "bf16"]]
    StudyVerdicts(study).add("k-b8", {"verdict": "slow: 9.0x at batch 8", "implicates": implicates, "batch_size": 8})


def _proposals(study: optuna.Study, batch_sizes: list[int], n: int = 40) -> list[tuple[int, str]]:
    seen = []
    for _ in range(n):
        trial = study.ask()
        batch = trial.suggest_categorical("batch_size", batch_sizes) if len(batch_sizes) > 1 else batch_sizes[0]
        seen.append((batch, trial.suggest_categorical("precision", ["fp32", "bf16"])))
        study.tell(trial, 1.0)
    return seen


def test_a_slow_verdict_avoids_its_values_only_at_the_batch_size_it_was_measured_at():
    study = optuna.create_study(sampler=AvoidKnownFailures(optuna.samplers.RandomSampler(seed=0), seed=0))
    _slow_bf16_at_batch_8(study)
    seen = _proposals(study, [8, 128])
    assert (8, "bf16") not in seen
    assert (128, "bf16") in seen  # overhead-bound at batch 8 is no verdict on batch 128


def test_a_slow_verdict_avoids_its_values_where_the_study_fixes_the_batch_size():
    study = optuna.create_study(sampler=AvoidKnownFailures(optuna.samplers.RandomSampler(seed=0), seed=0))
    _slow_bf16_at_batch_8(study)
    assert {precision for _, precision in _proposals(study, [8])} == {"fp32"}
