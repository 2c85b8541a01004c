"""What a GPU session derives from its steps' files: the probe_first sweep's share of its study
(issue 38, read from the study's SQLite file) and the memory budget's summary (issue 39)."""

from __future__ import annotations

import datetime
import sqlite3
import time

import optuna

from benchmarks.gpu_session_plan import LOCK, sweep_share
from benchmarks.memory_budget import summarize, table
from hpo.study.strategy import LOCK_ATTR


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


def _row(checkpointing: bool, speed: float | None, verdict: str = "ok", batch="auto", predicted=None, peak=None) -> dict:
    row = {"grad_checkpointing": checkpointing, "batch_size": batch, "verdict": verdict, "train_samples_per_s": speed}
    if predicted:
        row |= {"predicted_peak_mb": predicted, "peak_mem_mb": peak, "prediction_error": round(predicted / peak - 1, 3)}
    return row


def test_the_memory_summary_compares_the_fastest_auto_rows_and_ignores_the_rest():
    rows = {
        "bf16 on": _row(True, 286.5, predicted=25627, peak=25934),
        "fp32 on": _row(True, 120.0),
        "bf16 off": _row(False, 354.4, predicted=66631, peak=66615),
        "fp32 off": _row(False, None, verdict="oom: predicted 80 GB > limit 70 GB at batch 144 (fits up to 96)"),
        "bf16 off at 256": _row(False, 999.0, batch=256),  # a fixed batch is not an auto row
    }
    result = summarize(rows)
    assert result["best_with_checkpointing"] is rows["bf16 on"] and result["best_without_checkpointing"] is rows["bf16 off"]
    assert result["throughput_with_over_without"] == round(286.5 / 354.4, 3)
    assert result["prediction_error_range"] == [-0.012, 0.0]
    page = table({"rows": rows})
    assert "| bf16 on | ok | auto | 25627 | 25934 | -1.2% | 286.5 |" in page and "| fp32 off | oom: predicted 80 GB" in page


def test_without_an_auto_row_on_each_side_there_is_no_ratio():
    result = summarize({"on": _row(True, 10.0), "off": _row(False, None, verdict="error: exit 70")})
    assert result["throughput_with_over_without"] is None and result["prediction_error_range"] is None
