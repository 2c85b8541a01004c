"""A finished trial's progress line says where it stands in the study's n_trials ("3 of 8"), in words
that cannot be read as its time budget (`budget_s`)."""

from __future__ import annotations

import pytest

from hpo.reporting._progress import LineDisplay, TrialEvent


def _line(capsys, number: int, n_trials: int) -> str:
    LineDisplay(total=n_trials).show(TrialEvent(number, "complete", "ok", [0.5], {"precision": "bf16"}))
    return capsys.readouterr().err


@pytest.mark.parametrize("number,n_trials,position", [(0, 8, "(1 of 8)"), (2, 8, "(3 of 8)"), (7, 8, "(8 of 8)")])
def test_the_line_counts_trials_of_n_trials(capsys, number, n_trials, position):
    line = _line(capsys, number, n_trials)
    assert line.startswith(f"trial #{number} {position} complete [ok] 0.5 precision=bf16")
    assert "budget" not in line


def test_a_trial_past_n_trials_is_not_shown_as_one_of_them(capsys):
    line = _line(capsys, 9, 8)  # a retry's ticket is refunded, so numbers run past n_trials
    assert "(10; n_trials is 8, retries not counted)" in line and "of 8" not in line
