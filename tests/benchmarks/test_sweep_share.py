"""benchmarks.sweep_share runs a first and a repeated probe_first study and a joint one of the same
space, and reports each sweep from its decision: the repeated study reads every combination from
this machine's facts and times only its front runners once. A toy space, one trial each."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
SPACE = {
    "study": {"name": "share", "sampler": {"name": "random", "seed": 0}, "pruner": {"name": "none"}, "n_trials": 1},
    "workload": {"name": "toy_workloads:Toy", "max_steps": 2, "eval_every": 2},
    "params": {"lr": 1.0e-3, "batch_size": 8},
    "systems": {"precision": "fp32", "attention": ["eager", "sdpa"], "optimizer": ["forloop", "fused"]},
}


@pytest.mark.slow
def test_a_repeated_study_reads_the_first_ones_facts_and_times_only_its_front_runner(tmp_path):
    space, out = tmp_path / "space.yaml", tmp_path / "share.json"
    space.write_text(yaml.safe_dump(SPACE))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "tests")]), "KINETO_LOG_LEVEL": "5"}
    command = [sys.executable, "-m", "benchmarks.sweep_share", str(space), str(out), "--trials", "1"]
    run = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr[-3000:]
    first, repeated, joint = json.loads(out.read_text())["runs"]
    assert (first["strategy"], repeated["strategy"], joint["strategy"]) == ("probe_first", "probe_first", "joint")
    assert first["rows_from_machine"] == 0 and repeated["rows_from_machine"] == 4
    assert first["race_timings"] >= 4  # each of the four timed at least once more than the sweep's one step
    # One confirming step of fp32's front runner (keep_fastest 1); unless that step beat the stored
    # fastest by more than noise (a machine faster now than in the first study): then the decision
    # names fp32's stored race as discarded and fp32 is raced afresh.
    if repeated["stored_discarded"]:
        assert repeated["stored_discarded"] == ["fp32"] and repeated["race_timings"] >= 4, repeated
    else:
        assert repeated["race_timings"] == 1, repeated
    assert 0 < repeated["sweep_s"] < first["sweep_s"] and joint["sweep_s"] == 0.0
    assert "over_joint_s" in first and "wall_over_joint" in repeated
    for run in (first, repeated, joint):
        (trial,) = run["per_trial"]
        assert trial["state"] == "COMPLETE" and trial["steps_run"] == 2 and trial["s"] > 0, trial
        assert trial["knobs"]["precision"] == "fp32", trial
        assert len(run["trained_ends_s"]) == 1 and run["trained_ends_s"][0] <= run["wall_s"], run
    assert first["to_1_trained_over_joint"] > 0 and repeated["to_1_trained_over_joint"] > 0
