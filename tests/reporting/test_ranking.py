"""Which trials `hpo best`, `hpo export --top` and `hpo report` rank: the best or the Pareto front of
the trials that trained, even when a rejected trial's recorded value looks better."""

from __future__ import annotations

import random

import optuna
import pytest
from optuna.trial import TrialState, create_trial

from hpo.errors import UserInputError
from hpo.reporting import best_trials, top_trials


def _trial(values, verdict="ok"):
    return create_trial(state=TrialState.COMPLETE, values=values, user_attrs={"verdict": verdict})


def _study(directions, trials) -> optuna.Study:
    study = optuna.create_study(study_name="rank", directions=directions)
    study.add_trials(trials)
    return study


def test_a_placeholder_value_never_wins():
    # hpo 0.1 recorded a rejected trial's value as 0.0: better than every val_loss that trained.
    study = _study(["minimize"], [_trial([0.0], "slow: 18x"), _trial([2.0]), _trial([1.5]), _trial([1.5])])
    assert [t.number for t in best_trials(study)] == [2]  # of the tie, the first
    assert [t.number for t in top_trials(study, 5)] == [2, 3, 1]
    two = _study(["minimize", "maximize"], [_trial([0.0, 1e9], "oom: x"), _trial([2.0, 10.0]), _trial([1.0, 5.0])])
    assert [t.number for t in best_trials(two)] == [1, 2]


@pytest.mark.parametrize("directions", [["minimize", "maximize"], ["maximize", "maximize", "minimize"]])
def test_the_front_is_optunas_when_every_trial_trained(directions):
    rng = random.Random(0)
    # Values on a coarse grid, so that ties and duplicates occur.
    trials = [_trial([rng.randint(0, 6) for _ in directions]) for _ in range(200)]
    study = _study(directions, trials)
    assert [t.number for t in best_trials(study)] == sorted(t.number for t in study.best_trials)


def test_no_trained_trial_is_an_error_that_says_so():
    study = _study(["minimize"], [_trial([0.0], "incompatible: x")])
    with pytest.raises(UserInputError, match="no completed trial with verdict ok"):
        best_trials(study)


def test_a_missed_target_never_wins_and_is_compared_with_nothing():
    """A trial that trained but never reached workload.target has the worst value (+inf for time to
    target): never best, and left out of the knob-effect medians, where inf - inf would be NaN."""
    from hpo.reporting import knob_effects

    def timed(value, optimizer, reached):
        attrs = {"verdict": "ok", "train_samples_per_s": 100.0, "target_reached": reached}
        attrs["knobs_requested"] = {"precision": "fp32", "optimizer": optimizer}
        return create_trial(state=TrialState.COMPLETE, values=[value], user_attrs=attrs)

    missed = float("inf")
    study = _study(
        ["minimize"],
        [timed(missed, "fused", False), timed(3.0, "fused", True), timed(missed, "forloop", False), timed(5.0, "forloop", True)],
    )
    assert [t.number for t in best_trials(study)] == [1]
    (fused,) = [e for e in knob_effects(study.trials) if e.value == "fused"]
    assert fused.compared == 1 and fused.metric_diff == -2.0  # 3.0 against the for-loop trial that reached it
    only_missed = _study(["minimize"], [timed(missed, "fused", False)])
    with pytest.raises(UserInputError, match=r"1 trials trained, but 1 never reached workload\.target"):
        best_trials(only_missed)
