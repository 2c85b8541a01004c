"""hpo.app.gpu_check, `hpo gpu-check` and scripts/gpu-check on CPU with the toy workload: verdicts come from hpo's executor."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from conftest import TOY

from hpo.app.gpu_check import MatrixCheck, check, choices_from_flags, markdown, matrix, read_rows, run_matrix
from hpo.config.trial import Knobs

ROOT = Path(__file__).resolve().parents[2]
TINY = MatrixCheck(batch_size=8, steps=4, compile_backend="eager", device="cpu", options={TOY: {"d_model": 16, "n_blocks": 1}})
# Activations past fp16's range: the probe rejects every fp16 combination.
OVERFLOWS = dataclasses.replace(TINY, options={TOY: {"n_blocks": 2, "overflow": 1e5}})


def test_matrix_is_every_combination():
    flags = {"--precision": ["fp32", "bf16"], "--attention": ["eager"], "--optimizer": ["forloop", "fused"]}
    combos = matrix(choices_from_flags({**flags, "--checkpointing": ["false", "true"], "--compile": ["false", "default"]}))
    # Every other knob at the values gpu-check runs by default: one each here.
    assert len(combos) == 16 and len(set(combos)) == 16
    assert Knobs(precision="bf16", attention="eager", optimizer="fused", grad_checkpointing=True, compile="default") in combos


def test_rows_carry_the_probe_and_the_trained_run():
    reference = check(TOY, Knobs(precision="fp32", attention="eager", optimizer="forloop"), TINY)
    assert reference["verdict"] == "ok", reference
    # The probe does not time the reference against itself; its training steps give its speed.
    assert reference["samples_per_s"] > 0 and reference["speedup_vs_fp32_eager"] == 1.0
    assert reference["train_samples_per_s"] > 0 and reference["peak_mem_mb"] > 0
    sdpa = check(TOY, Knobs(precision="fp32", attention="sdpa", optimizer="forloop"), TINY)
    assert sdpa["verdict"] == "ok", sdpa
    assert sdpa["samples_per_s"] > 0 and sdpa["loss_rel_err"] < 1e-3 and sdpa["observed"]["attention"].startswith("sdpa")
    table = markdown([reference, sdpa], "cpu")
    fastest = max([reference, sdpa], key=lambda r: r["samples_per_s"])
    assert table.count(f"| {TOY} |") == 2 and f"Best on {TOY}: {fastest['knobs']}" in table


def test_a_rejected_combination_reads_as_its_verdict():
    row = check(TOY, Knobs(precision="fp16", attention="eager", optimizer="forloop"), OVERFLOWS)
    assert row["verdict"].startswith("incompatible: non-finite"), row
    assert row["train_samples_per_s"] is None


SMALLEST = ["--workloads", TOY, "--precision", "fp32", "--attention", "eager", "--optimizer", "forloop"]
SMALLEST += ["--checkpointing", "false", "--compile", "false", "--compile-backend", "eager", "--batch-size", "8", "--steps", "2"]


def _run(command: list[str], cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "tests")]), "KINETO_LOG_LEVEL": "5"}
    return subprocess.run(command, capture_output=True, text=True, timeout=300, env=env, cwd=cwd)


def _script(tmp_path, *extra: str) -> subprocess.CompletedProcess:
    script = [sys.executable, str(ROOT / "scripts" / "gpu-check"), *SMALLEST, "--device", "cpu", "--out-dir", str(tmp_path)]
    return _run([*script, *extra], tmp_path)


def test_hpo_gpu_check_writes_into_the_current_folder_by_default(tmp_path):
    """The command a pip-installed hpo has: `hpo gpu-check`, rows beside where it runs."""
    proc = _run([sys.executable, "-m", "hpo.app.cli", "gpu-check", *SMALLEST, "--device", "cpu"], tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    (written,) = tmp_path.glob("gpu-*.jsonl")
    assert [json.loads(line)["verdict"] for line in written.read_text().splitlines()] == ["ok"]
    assert proc.stdout.startswith("Knob verification on") and "-> ok" in proc.stderr


def test_hpo_gpu_check_refuses_an_unknown_knob_value(tmp_path):
    proc = _run([sys.executable, "-m", "hpo.app.cli", "gpu-check", "--precision", "fp8"], tmp_path)
    assert proc.returncode == 2 and "invalid choice: 'fp8'" in proc.stderr and "fp32" in proc.stderr
    assert not list(tmp_path.iterdir())


def test_hpo_gpu_check_runs_only_workloads_that_need_no_files_of_yours(tmp_path):
    from hpo.app.cli import build_parser
    from hpo.workloads.catalog import BUILTIN_WORKLOADS, NEEDS_USER_FILES, parse_options

    default = build_parser().parse_args(["gpu-check"]).workloads
    assert set(default) == set(BUILTIN_WORKLOADS) - set(NEEDS_USER_FILES)
    for name in default:
        parse_options(name, {})  # each default workload builds with no options of the user's
    for name in NEEDS_USER_FILES:  # each refused one really cannot
        with pytest.raises(Exception, match="model_name_or_path"):
            parse_options(name, {})
    proc = _run([sys.executable, "-m", "hpo.app.cli", "gpu-check", "--workloads", "causal_lm", "hf_causal_lm"], tmp_path)
    assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert "hf_causal_lm has none (it trains your checkpoint on your files)" in proc.stderr
    assert not list(tmp_path.iterdir())


def test_script_writes_json_lines_and_markdown(tmp_path):
    proc = _script(tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    (written,) = tmp_path.glob("gpu-*.jsonl")
    rows = [json.loads(line) for line in written.read_text().splitlines()]
    assert [r["verdict"] for r in rows] == ["ok"]
    (row,) = rows
    assert row["device"].startswith("cpu: ") and row["torch"] == torch.__version__ and row["date"]
    assert (row["batch_size"], row["steps"], row["compile_backend"]) == (8, 2, "eager")
    assert written.with_suffix(".md").read_text().startswith("Knob verification on")


def test_script_resumes_and_skips_the_combinations_already_written(tmp_path):
    first = _script(tmp_path, "--optimizer", "forloop", "foreach")  # two combinations
    assert first.returncode == 0, first.stderr[-2000:]
    (written,) = tmp_path.glob("gpu-*.jsonl")
    lines = written.read_text().splitlines()
    assert len(lines) == 2
    # As if the run had died during the second combination: its row was never written.
    written.write_text(lines[0] + "\n")
    again = _script(tmp_path, "--optimizer", "forloop", "foreach")
    assert again.returncode == 0, again.stderr[-2000:]
    assert "already in" in again.stderr and again.stderr.count("-> ok") == 1
    rows = [json.loads(line) for line in written.read_text().splitlines()]
    assert [r["knobs"]["optimizer"] for r in rows] == ["forloop", "foreach"]
    assert rows[0] == json.loads(lines[0])  # the first row untouched


@pytest.mark.slow
def test_a_crashing_combination_costs_only_itself(tmp_path, monkeypatch):
    """Each combination runs in its own process: a segfault (as a sticky CUDA error ends a process)
    is that combination's row, and the next combination runs in a clean process."""
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(ROOT), str(ROOT / "tests"), str(ROOT / "tests" / "workers")]))
    crashy = "crashy_workloads:Crashy"
    options = {crashy: {"d_model": 16, "n_blocks": 1, "misbehave": "signal"}, TOY: {"d_model": 16, "n_blocks": 1}}
    how = dataclasses.replace(TINY, options=options)
    path = tmp_path / "rows.jsonl"
    knobs = [Knobs(precision="fp32", attention="eager", optimizer="forloop")]
    rows = run_matrix(path, [crashy, TOY], knobs, how, {"device": "cpu", "torch": torch.__version__})
    assert rows[0]["workload"] == crashy and rows[0]["verdict"].startswith("crashed: exit -11"), rows[0]
    assert rows[1]["workload"] == TOY and rows[1]["verdict"] == "ok", rows[1]
    assert read_rows(path) == rows
