"""What `hpo run` exits with: 0 when at least one trial trained normally (others may have been
rejected, pruned or failed), 1 when none did or a worker failed, 2 for bad input."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]


def _run(tmp_path: Path, precision) -> subprocess.CompletedProcess:
    space = {
        "study": {"name": "codes", "sampler": {"name": "random", "seed": 0}, "pruner": {"name": "none"}, "n_trials": 3},
        # overflow pushes activations past fp16's range: every fp16 trial is rejected by the probe.
        "workload": {"name": "toy_workloads:Toy", "max_steps": 3, "eval_every": 3, "overflow": 1.0e5, "n_blocks": 2},
        "systems": {"precision": precision, "attention": "eager", "optimizer": "fused", "compile_backend": "eager"},
    }
    (tmp_path / "space.yaml").write_text(yaml.safe_dump(space))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), str(ROOT / "tests")]), KINETO_LOG_LEVEL="5")
    cmd = [sys.executable, "-m", "hpo.app.cli", "run", "space.yaml", "--in-process"]
    return subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)


def test_a_study_in_which_no_trial_trained_exits_1(tmp_path):
    run = _run(tmp_path, "fp16")
    assert run.returncode == 1, run.stderr[-2000:]
    assert "no best trial: study 'codes' has no completed trial with verdict ok yet" in run.stderr
    assert run.stderr.count("[incompatible: non-finite") == 3


def test_a_study_with_one_trained_trial_among_rejected_ones_exits_0(tmp_path):
    run = _run(tmp_path, ["fp16", "fp32"])
    assert run.returncode == 0, run.stderr[-2000:]
    assert "[incompatible: non-finite" in run.stderr and "[ok]" in run.stderr
    assert '"number"' in run.stdout  # the best trial, as JSON


def test_a_sampler_whose_package_is_missing_is_refused_before_anything_is_stored(tmp_path):
    space = {"study": {"name": "nocma", "sampler": {"name": "cmaes"}}, "workload": {"name": "toy_workloads:Toy"}}
    (tmp_path / "space.yaml").write_text(yaml.safe_dump(space))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), str(ROOT / "tests")]))
    code = "import sys, hpo.deps as d; d.is_installed = lambda m: m != 'cmaes'; import hpo.study.samplers as s; "
    code += "s.is_installed = d.is_installed; from hpo.app.cli import main; sys.exit(main(['run', 'space.yaml']))"
    run = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert run.returncode == 2, run.stderr
    assert "study.sampler.name: cmaes needs cmaes: pip install cmaes" in run.stderr
    assert not (tmp_path / "studies").exists()  # nothing stored
