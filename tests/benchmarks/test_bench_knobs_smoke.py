"""scripts/bench-knobs end to end on a tiny causal LM: one row per config, baseline ratios 1.0."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "bench-knobs"
TINY = ["--option", "d_model=32", "--option", "n_layers=1", "--option", "seq_len=32", "--option", "eval_batches=1"]


@pytest.mark.slow
def test_bench_knobs_writes_a_row_per_config(tmp_path):
    out = tmp_path / "bench.json"
    cmd = [
        sys.executable,
        str(SCRIPT),
        "--steps",
        "4",
        "--repeats",
        "1",
        "--batch-size",
        "8",
        "--overhead-steps",
        "4",
        "--configs",
        "fused,ckpt",
        "--no-skip-slow",
        "--device",
        "cpu",
        "--out",
        str(out),
        # Any evaluation beats a val_loss of 100: each config reaches it at its first evaluation.
        *("--target", "val_loss=100", "--target-max-steps", "6", "--target-eval-every", "2"),
        *TINY,
    ]
    # --no-skip-slow: on a shared CPU a noisy probe could otherwise call a config "slow" and skip it.
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=180, env={**os.environ, "KINETO_LOG_LEVEL": "5"})
    assert proc.returncode == 0, proc.stderr[-2000:]
    result = json.loads(out.read_text())

    rows = {row["config"]: row for row in result["rows"]}
    assert list(rows) == ["baseline", "fused", "ckpt"]
    for row in rows.values():
        assert row["verdict"] == "ok", row
        for key in ("samples_per_s", "step_ms", "peak_mem_mb"):
            assert row[key] > 0, (row["config"], key, row[key])
    for key in ("samples_per_s_ratio", "step_ms_ratio", "peak_mem_mb_ratio"):
        assert rows["baseline"][key] == pytest.approx(1.0)
    # Checkpointing keeps fewer activations for backward: the memory column must show it.
    assert rows["ckpt"]["peak_mem_mb"] < rows["baseline"]["peak_mem_mb"]
    assert rows["ckpt"]["knobs"]["grad_checkpointing"] is True

    overhead = result["overhead"]
    assert overhead["probe_s"] > 0 and 0 < overhead["probe_fraction"] < 1
    assert 0 < overhead["cached_lookup_s"] < overhead["cached_trial_s"]
    assert "baseline" in proc.stdout and "verification overhead" in proc.stdout

    target = result["time_to_target"]
    assert target["run"] == {"metric": "val_loss", "value": 100.0, "max_steps": 6, "eval_every": 2}
    reached = {row["config"]: row for row in target["rows"]}
    assert list(reached) == ["baseline", "fused", "ckpt"]
    for row in reached.values():
        assert row["reached"] and row["steps_run"] == 2 and row["time_to_target_s"] > 0 and row["mfu"] > 0
    assert reached["baseline"]["speedup_vs_baseline"] == 1.0
    assert "time to val_loss 100.0" in proc.stdout and "| baseline |" in proc.stdout
    assert set(result["meta"]["cpu_flags"]) >= {"avx512_bf16", "amx_bf16", "avx2"}


def _bad_input(tmp_path, *args: str) -> subprocess.CompletedProcess:
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), *args, "--out", str(tmp_path / "x.json")], capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 2 and not (tmp_path / "x.json").exists(), proc.stderr
    return proc


def test_unknown_config_is_a_user_error(tmp_path):
    proc = _bad_input(tmp_path, "--configs", "bf32")
    assert "unknown config 'bf32'" in proc.stderr and "bf16+fused" in proc.stderr


def test_a_target_that_is_not_metric_equals_number_is_a_user_error(tmp_path):
    assert "--target must be METRIC=NUMBER" in _bad_input(tmp_path, "--target", "val_loss").stderr
