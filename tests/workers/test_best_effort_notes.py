"""Dashboard notes are best-effort: a storage error while writing one warns once on stderr and
never ends the worker's study."""

from __future__ import annotations

import optuna
import sqlalchemy.exc

from hpo.reporting import DashboardNotes
from hpo.storage import storage_of


def _failing_notes_study(monkeypatch) -> optuna.Study:
    study = optuna.create_study()
    storage = storage_of(study)
    original = storage.set_study_system_attr

    def set_study_system_attr(study_id, key, value):
        if key.startswith("dashboard:"):  # optuna-dashboard's note keys; Optuna's own writes go through
            raise sqlalchemy.exc.OperationalError("INSERT ...", {}, Exception("server closed the connection unexpectedly"))
        return original(study_id, key, value)

    monkeypatch.setattr(storage, "set_study_system_attr", set_study_system_attr)
    return study


def test_a_failing_note_write_warns_once_and_the_trials_go_on(monkeypatch, capsys):
    study = _failing_notes_study(monkeypatch)
    notes = DashboardNotes(due=lambda finished: True)  # the study note too, after every trial
    study.optimize(lambda trial: trial.suggest_float("x", 0, 1), n_trials=3, callbacks=[notes])
    notes.update_study_note(study)  # what a worker does as it finishes
    assert [t.state for t in study.trials] == [optuna.trial.TrialState.COMPLETE] * 3
    err = capsys.readouterr().err
    assert err.count("a dashboard note could not be written") == 1
    assert "OperationalError: " in err and "the study goes on" in err
