"""Picking trials: the fastest within PCT of the best, never a rejected trial's placeholder."""

from __future__ import annotations

import optuna
import pytest
from optuna.trial import TrialState, create_trial

from hpo.app.pick import fastest_within, front_table
from hpo.errors import UserInputError


def _study(direction: str, rows: list[tuple[float, float, str]]) -> optuna.Study:
    study = optuna.create_study(direction=direction)
    for value, speed, verdict in rows:
        attrs = {"verdict": verdict, "train_samples_per_s": speed, "knobs_requested": {"precision": "bf16"}}
        attrs["knobs_observed"] = {"precision": "bf16"}  # hpo best shows the knobs as observed
        study.add_trial(create_trial(state=TrialState.COMPLETE, value=value, user_attrs=attrs))
    return study


def test_fastest_within_percent_of_the_best_loss():
    # trial 0 best loss but slow; trial 1 2% worse and 3x faster; trial 2 10% worse and fastest;
    # trial 3 a rejected trial whose placeholder value would look best.
    study = _study("minimize", [(2.00, 100.0, "ok"), (2.04, 300.0, "ok"), (2.20, 900.0, "ok"), (1.0, 5000.0, "slow: 9x")])
    assert fastest_within(study, 0).number == 0
    assert fastest_within(study, 5).number == 1
    assert fastest_within(study, 15).number == 2


def test_fastest_within_for_a_metric_to_maximize():
    study = _study("maximize", [(0.90, 100.0, "ok"), (0.88, 400.0, "ok"), (0.70, 900.0, "ok")])
    assert fastest_within(study, 3).number == 1


def test_no_trained_trial_or_negative_percent_is_a_user_error():
    with pytest.raises(UserInputError, match="no completed trial with verdict ok"):
        fastest_within(_study("minimize", [(1.0, 10.0, "incompatible: x")]), 5)
    with pytest.raises(UserInputError, match="--within must be a percentage >= 0, got -1"):
        fastest_within(_study("minimize", [(1.0, 10.0, "ok")]), -1)


def test_front_table_shows_metrics_speed_and_knobs():
    study = _study("minimize", [(2.0, 123.4, "ok")])
    table = front_table(study.trials, ["val_loss"]).splitlines()
    assert table[0].split()[:7] == ["trial", "val_loss", "samples/s", "data", "wait", "peak", "MB"]
    assert table[1].split()[:3] == ["0", "2", "123.4"] and "bf16" in table[1]
