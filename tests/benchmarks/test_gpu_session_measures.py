"""What a GPU session derives from its steps' files: the probe_first sweep's share of its study
(issue 38), read from the study's SQLite file."""

from __future__ import annotations

import datetime
import sqlite3
import time

import optuna

from benchmarks.gpu_session_plan import LOCK, sweep_share
from hpo.strategy import LOCK_ATTR


def test_the_lock_name_the_runner_reads_is_hpos():
    assert LOCK == LOCK_ATTR  # the runner imports no hpo, so it keeps a copy


def test_the_sweep_share_runs_from_the_sweepers_lock_to_the_first_trial(tmp_path):
    db = tmp_path / "probe_first.db"
    assert sweep_share(db) is None  # the study never started
    study = optuna.create_study(study_name="s", storage=f"sqlite:///{db}")
    study.set_user_attr(f"{LOCK}:0", {"host": "h", "pid": 1, "at": time.time() - 30.0})
    assert sweep_share(db) is None  # swept, no trial yet
    for value in (1.0, 2.0):
        trial = study.ask()
        study.tell(trial, value)
    # The trials took 30 s in all after a 30 s sweep (their times moved so the test need not wait).
    with sqlite3.connect(db) as con:
        (first,) = con.execute("SELECT MIN(datetime_start) FROM trials").fetchone()
        end = datetime.datetime.fromisoformat(first) + datetime.timedelta(seconds=30)
        con.execute("UPDATE trials SET datetime_complete = ? WHERE number = 1", (end.isoformat(sep=" "),))
    share = sweep_share(db)
    assert 29 < share["sweep_s"] < 32 and 59 < share["study_s"] < 62 and 0.47 < share["share"] < 0.53
