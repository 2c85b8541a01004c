"""A rejected trial never looks better than a trial that trained, to any tool: Optuna's best
trial and CLI, hpo best, optuna-dashboard's API, the importances; and the constraint still teaches
the sampler. The study's first trials are all rejected, the hardest case for a placeholder value."""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
from pathlib import Path

import optuna
import pytest
from web import free_port, get_json

from hpo.config.space import parse_space
from hpo.reporting import trained_trials
from hpo.runtime import run_worker
from hpo.storage import study_id_of
from hpo.study import create_or_resume

ROOT = Path(__file__).resolve().parents[2]
SPACE = {
    # skip_slow off: a toy step takes milliseconds, too few to time against the reference reliably.
    "study": {
        "name": "rejected-first",
        "sampler": {"name": "random", "seed": 0},
        "pruner": {"name": "none"},
        "n_trials": 4,
        "skip_slow": False,
    },
    # overflow pushes activations past fp16's range: every fp16 trial is incompatible.
    "workload": {"name": "toy_workloads:Toy", "max_steps": 3, "eval_every": 3, "overflow": 1.0e5, "n_blocks": 2},
    "params": {"lr": {"low": 1e-3, "high": 1e-2, "log": True}},
    "systems": {"precision": ["fp16", "fp32"], "attention": "eager", "optimizer": "fused", "compile_backend": "eager"},
}


@pytest.fixture(scope="module")
def study_url(tmp_path_factory) -> str:
    url = f"sqlite:///{tmp_path_factory.mktemp('rejected') / 'r.db'}"
    study = create_or_resume(parse_space(SPACE, source="test"), url)
    study.enqueue_trial({"precision": "fp16", "lr": 2e-3})
    study.enqueue_trial({"precision": "fp16", "lr": 5e-3})
    study.enqueue_trial({"precision": "fp32", "lr": 3e-3})
    study.enqueue_trial({"precision": "fp32", "lr": 9e-3})
    run_worker(study, url, isolate=False)
    return url


def test_rejected_trials_have_the_worst_value_and_a_violated_constraint(study_url):
    study = optuna.load_study(study_name="rejected-first", storage=study_url)
    rejected, trained = study.trials[:2], study.trials[2:]
    for t in rejected:
        assert t.user_attrs["verdict"].startswith("incompatible") and t.value == math.inf
        assert t.constraints == {"0": 1.0} and t.system_attrs["constraints"] == [1.0]  # where the dashboard reads it
    assert all(t.user_attrs["verdict"] == "ok" and math.isfinite(t.value) for t in trained)
    assert study.best_trial.number in {2, 3}
    assert optuna.importance.get_param_importances(study)  # computed over the finite values only
    assert {t.number for t in trained_trials(study)} == {2, 3}


def _cli(*args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), str(ROOT / "tests")]))
    return subprocess.run([*args], env=env, capture_output=True, text=True, timeout=120)


def test_optuna_cli_and_hpo_best_name_a_trained_trial(study_url):
    optuna_best = _cli(
        str(Path(sys.executable).parent / "optuna"),
        "best-trial",
        "--study-name",
        "rejected-first",
        "--storage",
        study_url,
        "-f",
        "json",
    )
    assert optuna_best.returncode == 0, optuna_best.stderr
    assert json.loads(optuna_best.stdout)["number"] in {2, 3}
    hpo_best = _cli(sys.executable, "-m", "hpo.app.cli", "best", "--study", "rejected-first", "--storage", study_url, "--json")
    assert hpo_best.returncode == 0, hpo_best.stderr
    assert [t["number"] for t in json.loads(hpo_best.stdout)] in ([2], [3])


def test_the_dashboard_names_a_trained_trial_best_and_shows_the_constraint(study_url):
    port = free_port()
    cmd = [
        sys.executable,
        "-m",
        "hpo.app.cli",
        "dashboard",
        "--study",
        "rejected-first",
        "--storage",
        study_url,
        "--port",
        str(port),
    ]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), str(ROOT / "tests")]))
    server = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        study = optuna.load_study(study_name="rejected-first", storage=study_url)
        detail = get_json(f"http://127.0.0.1:{port}/api/studies/{study_id_of(study)}")
        assert [t["number"] for t in detail["best_trials"]] in ([2], [3])
        assert [t["constraints"] for t in detail["trials"][:2]] == [[1.0], [1.0]]
    finally:
        server.send_signal(signal.SIGINT)
        server.communicate(timeout=30)
