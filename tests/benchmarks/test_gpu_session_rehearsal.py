"""The device call rehearsed on this CPU (benchmarks/gpu_session_rehearsal.py): scripts/gpu-session
--toy in a copy of the tree, by a venv that sees only torch, without git on PATH and without network,
with the carried wheels and without them. Every file the session measured comes back both times,
and what the machine lacks is one line each. About 50 s on a busy 2-core host; nothing downloaded."""

from __future__ import annotations

import pytest

from benchmarks.gpu_session_rehearsal import STEPS, rehearse


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_the_device_command_brings_its_files_back_in_a_bare_environment_with_and_without_wheels():
    with_wheels, without = rehearse(budget=400.0)
    for run in (with_wheels, without):
        assert run["rc"] == 0, run["stderr_tail"]
        assert list(run["steps"]) == STEPS.split(","), run["steps"]
        kind = next(f for f in run["files"] if f.endswith(".json")).removeprefix("gpu-session-").removesuffix(".json")
        assert {f"gpu-session-{kind}.{ext}" for ext in ("json", "log", "md")} <= set(run["files"]), run["files"]
        assert "git: not on PATH; commit as sent (--commit)" in run["missing"]
    # With the wheels every step ran, and the benchmark's file names the commit without git.
    assert set(with_wheels["steps"].values()) == {"ok"}, with_wheels["log_tail"]
    knobs = next(f for f in with_wheels["files"] if f.startswith("knobs-causal_lm-"))
    assert with_wheels["commits"][knobs] == "rehearse"
    assert "package optuna: not installed" not in with_wheels["missing"]
    # Without them each step fails, none ends the session, and the report says what was not carried.
    assert set(without["steps"].values()) == {"failed"} and len(without["files"]) == 3, without["files"]
    assert any(line.startswith("wheels: no *.whl in ") and "not carried?" in line for line in without["missing"])
    assert "package optuna: not installed" in without["missing"]
