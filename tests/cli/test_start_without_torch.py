"""The cheap commands never import torch or transformers: they run, and succeed, with a `torch` and a
`transformers` that raise ImportError when imported (first on PYTHONPATH). A study for them to read
is made in this process, which may import torch."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import optuna
import pytest
import yaml

from hpo.config.space import parse_space
from hpo.study import create_or_resume, suggest_config

ROOT = Path(__file__).resolve().parents[2]
POISONED = ("torch", "transformers")
SPACE = {
    "study": {"name": "light", "sampler": {"name": "random", "seed": 0}},
    "workload": {"name": "text_classification", "model": "tiny", "max_steps": 4},
    "params": {"lr": {"low": 1e-4, "high": 1e-2, "log": True}, "batch_size": 16},
    "systems": {"precision": ["fp32", "bf16"], "attention": "eager", "optimizer": "forloop"},
}
SUBCOMMANDS = ["validate", "run", "worker", "best", "export", "enqueue", "train", "doctor", "dashboard", "report"]


@pytest.fixture(scope="module")
def poisoned_env(tmp_path_factory) -> dict[str, str]:
    poison = tmp_path_factory.mktemp("poison")
    for name in POISONED:
        (poison / name).mkdir()
        (poison / name / "__init__.py").write_text(f"raise ImportError('{name} must not be imported by this command')\n")
    path = os.pathsep.join([str(poison), str(ROOT), str(ROOT / "tests")])
    return dict(os.environ, PYTHONPATH=path, OMP_NUM_THREADS="1")


def _hpo(env: dict, cwd: Path, *argv: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "hpo.app.cli", *argv], env=env, cwd=cwd, capture_output=True, text=True, timeout=120
    )


def test_the_poison_works(poisoned_env, tmp_path):
    for name in POISONED:
        probe = subprocess.run(
            [sys.executable, "-c", f"import {name}"], env=poisoned_env, cwd=tmp_path, capture_output=True, text=True
        )
        assert probe.returncode == 1 and "must not be imported" in probe.stderr


@pytest.mark.parametrize("argv", [["--help"], ["--version"]] + [[name, "--help"] for name in SUBCOMMANDS], ids=" ".join)
def test_help_starts_without_torch(poisoned_env, tmp_path, argv):
    done = _hpo(poisoned_env, tmp_path, *argv)
    assert done.returncode == 0 and done.stdout.startswith(("usage: hpo", "hpo ")), done.stderr


def test_validate_starts_without_torch(poisoned_env, tmp_path):
    good, bad = tmp_path / "good.yaml", tmp_path / "bad.yaml"
    good.write_text(yaml.safe_dump(SPACE))
    bad.write_text(yaml.safe_dump({**SPACE, "systems": {"precision": "fp64"}}))
    done = _hpo(poisoned_env, tmp_path, "validate", str(good))
    assert done.returncode == 0 and "ok (study 'light', workload 'text_classification'" in done.stdout, done.stderr
    done = _hpo(poisoned_env, tmp_path, "validate", str(bad))
    assert done.returncode == 2 and done.stderr.strip().endswith(
        "systems.precision: Input should be 'fp32', 'bf16' or 'fp16', got 'fp64'"
    )


@pytest.fixture
def study_with_a_trial(tmp_path) -> str:
    """A study made by `hpo run` with one finished trial, recorded as a trial records itself."""
    space = parse_space(SPACE, source="space.yaml")
    url = f"sqlite:///{tmp_path / 'light.db'}"
    study = create_or_resume(space, url)
    trial = study.ask()
    config = suggest_config(trial, space)
    for key, value in {"config": config.to_dict(), "verdict": "ok", "knobs_requested": config.knobs.as_dict()}.items():
        trial.set_user_attr(key, value)
    study.tell(trial, 0.5)
    return url


def test_best_export_and_enqueue_start_without_torch(poisoned_env, tmp_path, study_with_a_trial):
    url = study_with_a_trial
    best = _hpo(poisoned_env, tmp_path, "best", "--study", "light", "--storage", url)
    assert best.returncode == 0, best.stderr
    assert best.stdout.startswith("Pareto front of study 'light'") and best.stdout.splitlines()[2].split()[:2] == ["0", "0.5"]
    assert _hpo(poisoned_env, tmp_path, "best", "--study", "light", "--storage", url, "--json").returncode == 0
    exported = tmp_path / "best.yaml"
    export = _hpo(poisoned_env, tmp_path, "export", "--study", "light", "--storage", url, "-o", str(exported))
    assert export.returncode == 0, export.stderr
    assert _hpo(poisoned_env, tmp_path, "validate", str(exported)).returncode == 0
    enqueue = _hpo(poisoned_env, tmp_path, "enqueue", "--study", "light", "--storage", url, str(exported))
    assert enqueue.returncode == 0 and "enqueued in study 'light' as a waiting trial" in enqueue.stdout, enqueue.stderr
    study = optuna.load_study(study_name="light", storage=url)
    assert len(study.get_trials(states=[optuna.trial.TrialState.WAITING])) == 1


def test_enqueue_of_a_config_outside_the_space_is_one_line_and_writes_nothing(poisoned_env, tmp_path, study_with_a_trial):
    url = study_with_a_trial
    config = optuna.load_study(study_name="light", storage=url).trials[0].user_attrs["config"]
    config["params"]["batch_size"] = 32
    other = tmp_path / "other.yaml"
    other.write_text(yaml.safe_dump(config))
    done = _hpo(poisoned_env, tmp_path, "enqueue", "--study", "light", "--storage", url, str(other))
    assert done.returncode == 2 and done.stdout == "", done.stderr
    assert done.stderr.splitlines() == [
        f"hpo enqueue: error: {other}: params.batch_size: the config has 32 but study 'light' fixes 16; "
        "enqueue a config of the same workload and fixed values, or edit the file"
    ]
    assert len(optuna.load_study(study_name="light", storage=url).trials) == 1
