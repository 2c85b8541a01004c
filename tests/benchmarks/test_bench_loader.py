"""scripts/bench-loader: --device reaches every trial, CUDA runs each searched setting with
pin_memory false and true, and the JSON is rewritten after every row, so a run cut short keeps
what it finished."""

from __future__ import annotations

import importlib.machinery
import importlib.util
import json
from pathlib import Path

import pytest

import benchmarks.loader as loader
from benchmarks.loader import FIXED_GUESSES, SEARCHED, settings_for

REPO = Path(__file__).resolve().parents[2]


def _script():
    source = importlib.machinery.SourceFileLoader("bench_loader", str(REPO / "scripts" / "bench-loader"))
    module = importlib.util.module_from_spec(importlib.util.spec_from_loader("bench_loader", source))
    source.exec_module(module)
    return module


def test_cuda_runs_each_searched_setting_unpinned_then_pinned():
    cuda, cpu = settings_for("cuda"), settings_for("cpu")
    searched = [s for n, s in cuda.items() if n not in FIXED_GUESSES]
    assert len(searched) == 2 * len(SEARCHED)
    assert [s.pin_memory for s in searched] == [False, True] * len(SEARCHED)  # pairs side by side: a cut keeps whole pairs
    assert [s.num_workers for s in searched[::2]] == [s.num_workers for s in searched[1::2]]
    assert not any(s.pin_memory for n, s in cpu.items() if n not in FIXED_GUESSES)  # pinning does nothing on a CPU


class _Outcome:
    def __init__(self, config):
        self.verdict = "ok"
        self.attrs = {"train_samples_per_s": 100.0 + config.loader.num_workers, "data_wait_share": 0.1, "loader_observed": {}}


def test_the_json_is_written_after_each_row_and_device_reaches_every_trial(tmp_path, monkeypatch):
    seen = []

    def execute(config, verdicts):
        seen.append((config.device, config.loader.pin_memory))
        if len(seen) == 3:
            raise RuntimeError("killed at the step's limit")
        out = json.loads((tmp_path / "loader.json").read_text()) if len(seen) > 1 else None
        assert out is None or len(out["rows"]) == len(seen) - 1  # the row before this one is already on disk
        return _Outcome(config)

    monkeypatch.setattr(loader, "execute", execute)
    with pytest.raises(RuntimeError):
        _script().main(["--device", "cuda", "--steps", "2", "--out", str(tmp_path / "loader.json")])
    assert seen == [("cuda", False), ("cuda", True), ("cuda", False)]
    written = json.loads((tmp_path / "loader.json").read_text())
    assert list(written["rows"]) == list(settings_for("cuda"))[:2] and written["device"] == "cuda"
    assert written["args"]["device"] == "cuda" and written["picked"] in written["rows"]
    assert len(written["not_run"]) == len(settings_for("cuda")) - 2


def test_no_setting_starts_past_the_time_cap_and_the_rest_are_named(tmp_path):
    out = tmp_path / "loader.json"
    assert _script().main(["--steps", "2", "--images", "32", "--size", "32", "--time-cap", "0.01", "--out", str(out)]) == 0
    written = json.loads(out.read_text())
    first = next(iter(SEARCHED))
    assert list(written["rows"]) == [first] and written["rows"][first]["verdict"] == "ok"  # a real trial on this CPU
    assert written["device"] == "cpu" and written["picked"] == first
    assert written["not_run"] == [n for n in settings_for("cpu") if n != first]
