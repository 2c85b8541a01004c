"""benchmarks.scale and scale_growth on SQLite at tiny sizes: hpo's own worker loop, sampler and budget."""

from __future__ import annotations

import optuna
import pytest

from benchmarks.scale import run_workers
from benchmarks.scale_growth import run_growth


def test_growth_fills_the_study_and_asks_with_hpos_sampler():
    rows = run_growth("sqlite://", sizes=[4, 8], window=2)
    assert [r["size"] for r in rows] == [4, 8]
    for r in rows:
        assert 0 < r["ask_ms_median"] <= r["ask_ms_max"] and r["db_ms_median"] > 0


@pytest.mark.slow
def test_workers_run_hpos_worker_loop_to_the_budget(capsys):
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    row = run_workers("sqlite://", workers=1, per_worker=2)
    assert "budget check FAILED" not in capsys.readouterr().err
    assert row["trials"] == 2 and row["failed_workers"] == 0
    assert row["trial_ms_median"] > 0 and row["db_ms_median"] > 0 and row["trials_per_s"] > 0
