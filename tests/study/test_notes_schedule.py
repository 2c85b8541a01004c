"""The study note's schedule thins out as the study grows, so its cost per trial stays flat."""

from __future__ import annotations

from hpo.reporting import study_note_due


def test_the_study_note_is_due_every_10_trials_to_100_then_every_100_to_1000_and_so_on():
    due = [n for n in range(1, 3001) if study_note_due(n)]
    assert due == [*range(10, 101, 10), *range(200, 1001, 100), 2000, 3000]
    # Updates read every trial: with k updates in n trials their cost per trial stays bounded.
    assert sum(study_note_due(n) for n in range(1, 10_001)) == 10 + 9 + 9
