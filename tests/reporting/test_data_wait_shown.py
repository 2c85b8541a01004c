"""`data_wait_share` (time blocked on the next batch over training time) is shown by `hpo best`'s
table, the report's trial table and the dashboard note of each trial."""

from __future__ import annotations

import optuna

from hpo.app.pick import front_table
from hpo.app.report import _trial_rows
from hpo.reporting._notes import trial_note


def _trial(share):
    attrs = {"verdict": "ok", "train_samples_per_s": 100.0, **({} if share is None else {"data_wait_share": share})}
    return optuna.trial.create_trial(value=0.5, user_attrs=attrs)


def test_best_table_has_a_data_wait_column():
    table = front_table([_trial(0.42), _trial(None)], ["val_loss"])
    header, waited, unknown = table.splitlines()
    assert "data wait" in header
    assert "42%" in waited and "42%" not in unknown


def test_trial_note_says_the_data_wait():
    assert "- data wait: 42% of training time" in trial_note(_trial(0.42))
    assert "- data wait: n/a of training time" in trial_note(_trial(None))


def test_report_trial_table_has_a_data_wait_column():
    study = optuna.create_study()
    study.add_trial(_trial(0.42))
    rows = _trial_rows(study)
    assert "<th>data wait</th>" in rows.replace(" ", "") or "data wait" in rows
    assert "<td>42%</td>" in rows
