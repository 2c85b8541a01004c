"""The study-level comparison of scripts/bench-vs-hf --budget-s: its arithmetic on given trials,
and one real run at the smallest budget (every side runs, the JSON holds the curves and the figure)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks.vs_hf_anytime import KNOBS, SIDES, curve, reach_fractions, strategy_space
from benchmarks.vs_hf_task import SearchTask
from hpo.config.space import parse_space

ROOT = Path(__file__).resolve().parents[2]


def _trial(at: float, value: float | None, state: str = "COMPLETE") -> dict:
    return {"complete": 100.0 + at, "objective": value, "state": state}


def test_the_curve_is_the_best_so_far_within_the_budget_skipping_rejected_trials():
    trials = [_trial(5, 3.0), _trial(2, 4.0), _trial(7, float("inf")), _trial(8, None, "FAIL"), _trial(9, 2.0), _trial(31, 1.0)]
    assert curve(trials, launch=100.0, budget_s=30) == [[2, 4.0], [5, 3.0], [9, 2.0]]


def test_the_figure_is_when_each_side_reached_hfs_final_best_over_hfs_wall_time():
    def run(side, seed, points, wall=40.0):
        return {"side": side, "seed": seed, "curve": points, "wall_s": wall}

    runs = [
        run("hf", 0, [[10, 3.0], [30, 2.5]]),
        run("joint", 0, [[12, 2.9], [36, 2.6]]),  # never reaches 2.5
        run("probe_first", 0, [[8, 2.4]]),
        run("hf", 1, [[20, 2.0]], wall=20.0),
        run("joint", 1, [[10, 2.0]]),
        run("probe_first", 1, [[5, 1.9]]),
    ]
    figure = reach_fractions(runs, [0, 1])
    assert figure["hf"]["per_seed"] == [0.75, 1.0]
    assert figure["joint"]["per_seed"] == [None, 0.5] and figure["joint"]["median"] is None  # half never reached
    assert figure["probe_first"]["per_seed"] == [0.2, 0.25] and figure["probe_first"]["median"] == pytest.approx(0.225)
    assert figure["probe_first"]["final_best"] == [2.4, 1.9]


@pytest.mark.parametrize("strategy", ["joint", "probe_first"])
def test_both_hpo_sides_search_the_knobs_under_their_strategy(strategy):
    space = parse_space(strategy_space(SearchTask(workload="causal_lm", steps=2, trials=5), strategy), "bench")
    assert space.study.strategy == strategy and {k: space.systems[k] for k in KNOBS} == KNOBS


@pytest.mark.slow
def test_bench_vs_hf_budget_runs_all_three_sides_and_writes_curves_and_the_figure(tmp_path):
    cmd = [sys.executable, str(ROOT / "scripts" / "bench-vs-hf"), "--task", "causal_lm", "--steps", "2"]
    cmd += ["--budget-s", "25", "--seeds", "1", "--out-dir", str(tmp_path)]
    env = {**os.environ, "KINETO_LOG_LEVEL": "5", "PYTHONPATH": str(ROOT)}
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=900, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    (out,) = tmp_path.glob("vs-hf-anytime-causal_lm-2-steps-*.json")
    result = json.loads(out.read_text())
    assert [(r["side"], r["seed"]) for r in result["runs"]] == [(side, 0) for side in SIDES]
    hf = result["runs"][0]
    assert hf["curve"] and all(at <= 25 for at, _ in hf["curve"])  # HF trains at least one trial in 25 s
    assert result["figure"]["hf"]["per_seed"][0] <= 1.0
    assert set(result["meta"]["cpu_flags"]) >= {"avx512_bf16", "amx_bf16"}
    probe_first = result["runs"][2]
    # The side is stopped at its budget plus a grace period, which may land inside a trial: that one
    # is left RUNNING with no knobs (it ran none to the end); every trial that finished took the sweep's.
    finished = [t for t in probe_first["trials"] if t["state"] == "COMPLETE"]
    assert probe_first["rejected_by_knob_verdict"] == 0 and finished and all(t["knobs_sweep_rank"] for t in finished)
    assert "| probe_first |" in proc.stdout
    assert ("no plot: matplotlib is not installed" in proc.stdout) != (tmp_path / out.with_suffix(".png").name).exists()
