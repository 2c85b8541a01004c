"""scripts/bench-false-slow's own logic: which verdicts it confirms, the rule that calls one false,
the per-side summary, the plain loop's statistic, the trials read back from a study's database,
and that the spinners it loads the host with all end, even when the benchmark raises."""

from __future__ import annotations

import json
import os
import sqlite3

import pytest

from benchmarks.false_slow import is_false_slow, markdown_table, slow_verdicts, summarize
from benchmarks.false_slow_load import busy_cores
from benchmarks.false_slow_plain import median_ratio, run_plain
from benchmarks.false_slow_report import report
from benchmarks.false_slow_study import read_trials


def _trial(verdict: str, false_slow: bool | None = None, slowdown: float | None = None) -> dict:
    return {"verdict": verdict, "false_slow": false_slow, "slowdown": slowdown}


def test_a_slow_verdict_is_false_only_when_the_plain_loop_measures_under_the_limit():
    assert is_false_slow(1.6, 2.5) is True
    assert is_false_slow(2.5, 2.5) is False  # at the limit the verdict holds
    assert is_false_slow(7.0, 2.5) is False
    assert is_false_slow(None, 2.5) is None  # no plain ratio: unknown, never counted as true or false


def test_only_slow_verdicts_are_confirmed():
    study = {"trials": [_trial("ok"), _trial("slow: at least 3.1x ..."), _trial("incompatible: slow to say"), _trial("oom: ...")]}
    assert [t["verdict"] for t in slow_verdicts(study)] == ["slow: at least 3.1x ..."]


def test_the_summary_counts_each_side_apart_and_its_rate_over_slow_verdicts():
    studies = [
        {"side": "before", "trials": [_trial("slow: a", True), _trial("slow: b", False), _trial("ok", slowdown=1.2)]},
        {"side": "before", "trials": [_trial("slow: c", True), _trial("ok")]},
        {"side": "after", "trials": [_trial("ok", slowdown=1.4), _trial("slow: d", None)]},
        {"side": "after", "trials": [_trial("ok", slowdown=0.9)]},
    ]
    summary = summarize(studies)
    assert summary["before"] == {
        "studies": 2,
        "trials": 5,
        "judged": 4,
        "slow": 3,
        "false_slow": 2,
        "unconfirmable": 0,
        "false_slow_rate": 0.667,
    }
    assert summary["after"] == {
        "studies": 2,
        "trials": 3,
        "judged": 3,
        "slow": 1,
        "false_slow": 0,
        "unconfirmable": 1,
        "false_slow_rate": 0.0,
    }


def test_no_slow_verdict_leaves_the_rate_unknown_not_zero():
    assert summarize([{"side": "after", "trials": [_trial("ok", slowdown=1.0)]}])["after"]["false_slow_rate"] is None


def test_the_plain_ratio_is_the_median_of_per_round_ratios():
    # Paired by round: a reference step slowed by a burst moves one ratio, not the whole statistic.
    assert median_ratio([1.0, 10.0, 10.0], [10.0, 1.0, 1.0]) == pytest.approx(0.1)  # ratio of medians would say 10
    with pytest.raises(ValueError):
        median_ratio([1.0, 2.0], [1.0])


def test_the_plain_loop_times_both_sides_every_round():
    sizes = {"d_model": 16, "n_layers": 1, "seq_len": 8, "batch_size": 2}
    result = run_plain(sizes, "bf16", checkpointing=True, rounds=3)
    assert len(result["reference_ms"]) == len(result["knobs_ms"]) == 3
    assert result["ratio"] > 0


def test_trials_are_read_back_from_the_study_database(tmp_path):
    db_path = tmp_path / "study.db"
    with sqlite3.connect(db_path) as db:
        db.execute("create table trials (trial_id integer, number integer, state text)")
        db.execute("create table trial_user_attributes (trial_id integer, key text, value_json text)")
        db.executemany("insert into trials values (?, ?, ?)", [(7, 1, "PRUNED"), (3, 0, "COMPLETE")])
        attrs = [
            (3, "verdict", "ok"),
            (3, "slowdown", 1.3),
            (7, "verdict", "slow: at least 4.0x"),
            (7, "knobs_requested", {"precision": "bf16"}),
        ]
        db.executemany("insert into trial_user_attributes values (?, ?, ?)", [(t, k, json.dumps(v)) for t, k, v in attrs])
    trials = read_trials(db_path)
    assert [t["number"] for t in trials] == [0, 1]
    assert trials[0]["slowdown"] == 1.3 and trials[0]["knobs_requested"] is None
    assert trials[1]["verdict"] == "slow: at least 4.0x" and trials[1]["state"] == "PRUNED"
    assert trials[1]["knobs_requested"] == {"precision": "bf16"}


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with open(f"/proc/{pid}/stat") as stat:  # a zombie is dead: reaped or not, it no longer spins
        return stat.read().split(")")[-1].split()[0] != "Z"


def test_every_spinner_ends_even_when_the_benchmark_raises(monkeypatch):
    monkeypatch.setattr(os, "cpu_count", lambda: 1)
    seen: list[int] = []
    with pytest.raises(RuntimeError, match="injected"), busy_cores(factor=2) as count:
        assert count == 2
        seen = [int(p) for p in os.listdir("/proc") if p.isdigit() and _spinner_of(int(p))]
        raise RuntimeError("injected")
    assert len(seen) == 2
    assert not any(_alive(pid) for pid in seen)


def _spinner_of(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as cmdline:
            text = cmdline.read()
        with open(f"/proc/{pid}/stat") as stat:
            parent = int(stat.read().split(")")[-1].split()[1])
    except OSError:
        return False
    return parent == os.getpid() and b"while True" in text


def test_the_docs_table_has_a_row_per_side_and_says_when_nothing_was_slow():
    summary = summarize([
        {"side": "before", "trials": [_trial("slow: a", True), _trial("slow: b", False)]},
        {"side": "after", "trials": [_trial("ok", slowdown=1.1)]},
    ])  # fmt: skip
    rows = markdown_table(summary).splitlines()[2:]
    assert rows == ["| before | 1 | 2 | 2 | 2 | 1 | 50% |", "| after | 1 | 1 | 1 | 0 | 0 | no slow verdict |"]


def test_the_report_names_each_slow_verdict_with_the_plain_ratio_and_its_answer():
    slow = {"number": 2, "verdict": "slow: at least 3.0x", "knobs_requested": {"precision": "fp32", "grad_checkpointing": True},
            "plain": {"ratio": 1.2}, "false_slow": True, "slowdown": 3.0}  # fmt: skip
    result = {
        "meta": {"date": "d", "commit": "c", "cpu_model": "m", "command": "cmd"},
        "spinners": 6,
        "elapsed_s": 1,
        "studies": [{"side": "before", "seed": 1000, "load_average_after": [18.0, 1, 1], "trials": [slow]}],
    }
    text = report(result)
    assert "- before, seed 1000, trial 2 (fp32, checkpointing true): `slow: at least 3.0x`; plain loop 1.2x, false" in text
    assert "| before | fp32, checkpointing true | 1 | 3.00 / 3.00 / 3.00 |" in text
