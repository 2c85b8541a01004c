"""Warm start: the best configurations of study A become the first trials of study B, mapped onto
B's space (a param B does not search is dropped; a value outside B's space skips that one)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import optuna
import yaml
from optuna.trial import TrialState

ROOT = Path(__file__).resolve().parents[2]
SPACE = {
    "study": {"name": "a", "sampler": {"name": "random", "seed": 0}, "pruner": {"name": "none"}, "n_trials": 3},
    "workload": {"name": "toy_workloads:Toy", "max_steps": 2, "eval_every": 2, "n_blocks": 1},
    "params": {"lr": {"low": 1e-4, "high": 1e-2, "log": True}},
    "systems": {"precision": "fp32", "attention": ["eager", "sdpa"], "optimizer": "forloop", "compile_backend": "eager"},
}


def _hpo(*args, cwd: Path) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), str(ROOT / "tests")]), KINETO_LOG_LEVEL="5")
    return subprocess.run(
        [sys.executable, "-m", "hpo.app.cli", *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=600
    )


def test_the_best_of_one_study_start_another(tmp_path):
    (tmp_path / "a.yaml").write_text(yaml.safe_dump(SPACE))
    assert _hpo("run", "a.yaml", "--in-process", cwd=tmp_path).returncode == 0
    url_a = f"sqlite:///{tmp_path / 'studies' / 'a.db'}"
    a = optuna.load_study(study_name="a", storage=url_a)
    ranked = sorted(a.trials, key=lambda t: t.value)

    # B: a bigger model, attention fixed (not searched), a narrower lr range that excludes A's worst.
    b_space = {**SPACE, "study": {**SPACE["study"], "name": "b", "n_trials": 2}}
    b_space["workload"] = {**SPACE["workload"], "d_model": 48}
    b_space["systems"] = {**SPACE["systems"], "attention": "sdpa"}
    lrs = sorted(t.params["lr"] for t in ranked[:2])
    b_space["params"] = {"lr": {"low": lrs[0] * 0.999, "high": lrs[1] * 1.001, "log": True}}
    (tmp_path / "b.yaml").write_text(yaml.safe_dump(b_space))
    out = _hpo("enqueue", "--from-study", "a", "--to-study", "b", "--space", "b.yaml", "--top", "3",
               "--storage", f"sqlite:///{tmp_path / 'b.db'}", "--from-storage", url_a, "--format", "json", cwd=tmp_path)  # fmt: skip
    assert out.returncode == 0, out.stderr[-2000:]
    rows = json.loads(out.stdout)
    assert [r["source"] for r in rows] == [f"a trial {t.number}" for t in ranked]
    assert [r["params"] for r in rows[:2]] == [{"lr": t.params["lr"]} for t in ranked[:2]] and rows[2]["params"] is None
    assert rows[2]["skipped"].startswith("outside 'b''s space: lr=") and {r["study"] for r in rows} == {"b"}

    assert _hpo("run", "b.yaml", "--storage", f"sqlite:///{tmp_path / 'b.db'}", "--in-process", cwd=tmp_path).returncode == 0
    b = optuna.load_study(study_name="b", storage=f"sqlite:///{tmp_path / 'b.db'}")
    first_two = [t for t in b.trials if t.state == TrialState.COMPLETE][:2]
    assert [t.params for t in first_two] == [{"lr": t.params["lr"]} for t in ranked[:2]]  # attention dropped
    assert [t.user_attrs["warm_start_from"] for t in first_two] == [f"a#{t.number}" for t in ranked[:2]]
