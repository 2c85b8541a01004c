"""benchmarks.notes_cost on the real PostgreSQL server at a tiny size: the workers run with notes on,
then each trial's note callback is replayed and timed on the finished study."""

from __future__ import annotations

import optuna
import pytest
from conftest import POSTGRES_ADMIN

from benchmarks.notes_cost import run_notes_cost


@pytest.mark.slow
@pytest.mark.postgres
def test_notes_cost_times_each_trials_note_and_the_study_note(capsys):
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    result = run_notes_cost(POSTGRES_ADMIN, workers=2, per_worker=3)
    assert "budget check FAILED" not in capsys.readouterr().err
    study, notes = result["study"], result["notes"]
    assert study["trials"] == notes["trials"] == 6 and study["failed_workers"] == 0
    assert 0 < notes["trial_note_ms_median"] <= notes["trial_note_ms_p95"]
    assert notes["study_note_ms_at_final_size"] > 0 and result["notes_share_of_trial"] > 0
