"""What optuna-dashboard notes cost a study that many workers share on PostgreSQL.

The study runs as `benchmarks.scale.run_workers` runs it (W worker processes, hpo's own loop and
objective, a tiny model, notes on, as users get them), with two knobs searched so that the study
note has a knob-effect table to compute. On the finished study, each trial's note callback is then
replayed and timed: the trial's note (a few system-attr writes) and the study note (every trial read back and the table recomputed), at the study's final size,
so the figures are an upper bound for the earlier, smaller updates. `study_note_due` sets how
many updates a study of this size gets.
"""

from __future__ import annotations

import statistics
import time

import optuna

from benchmarks.scale import FIXED_KNOBS, run_workers
from benchmarks.scale_db import percentile
from hpo.reporting import DashboardNotes, study_note_due
from hpo.storage import open_storage

__all__ = ["SEARCHED_KNOBS", "replay_notes", "run_notes_cost"]

SEARCHED_KNOBS = {**FIXED_KNOBS, "precision": ["fp32", "bf16"], "attention": ["eager", "sdpa"]}


def replay_notes(url: str, name: str) -> dict:
    storage = open_storage(url)
    study = optuna.load_study(study_name=name, storage=storage)
    trials = sorted(study.get_trials(deepcopy=False), key=lambda t: t.number)
    notes, trial_ms = DashboardNotes(due=lambda finished: False), []  # the study note is timed apart
    for trial in trials:
        start = time.perf_counter()
        notes(study, trial)
        trial_ms.append(1e3 * (time.perf_counter() - start))
    study_ms = []
    for _ in range(3):
        start = time.perf_counter()
        notes.update_study_note(study)
        study_ms.append(1e3 * (time.perf_counter() - start))
    storage.engine.dispose()
    study_note_ms = statistics.median(study_ms)
    # Each scheduled update counted at the final size's cost: an upper bound on their sum.
    updates = sum(study_note_due(finished) for finished in range(1, len(trials) + 1))
    return {
        "trials": len(trials),
        "trial_note_ms_median": round(statistics.median(trial_ms), 2),
        "trial_note_ms_p95": round(percentile(trial_ms, 95), 2),
        "study_note_ms_at_final_size": round(study_note_ms, 1),
        "study_note_updates": updates,
        "notes_ms_per_trial": round(statistics.median(trial_ms) + updates * study_note_ms / len(trials), 2),
    }


def run_notes_cost(admin: str, workers: int, per_worker: int) -> dict:
    row = run_workers(admin, workers, per_worker, systems=SEARCHED_KNOBS, after=replay_notes)
    notes = row.pop("after")
    # The share of a worker's time the notes take: their cost per trial over the trial's own duration.
    share = notes["notes_ms_per_trial"] / row["trial_ms_median"] if row["trial_ms_median"] else None
    return {"study": row, "notes": notes, "notes_share_of_trial": None if share is None else round(share, 4)}
