"""`hpo run` of an edited file on an existing study, through the CLI: each changed setting is
applied (one line on stderr naming the key and both values, and what workers read is the new
value), or the run is refused with exit 2 naming it and the storage is left as it was."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from pathlib import Path

import optuna
import pytest
from key_paths import edited
from space_files import write_space

from hpo.storage import TicketBudget, engine_of, open_storage, storage_of
from hpo.study import open_hpo_study

ROOT = Path(__file__).resolve().parents[2]
BASE = {
    "study": {"name": "edits", "sampler": {"name": "tpe", "seed": 0}, "pruner": {"name": "median"}, "n_trials": 5},
    "workload": {"name": "toy_workloads:Toy", "max_steps": 2, "eval_every": 2},
    "params": {"lr": {"low": 1.0e-4, "high": 1.0e-2, "log": True}},
    "systems": {"precision": "fp32", "attention": "eager", "optimizer": "forloop"},
}
SETTINGS = {
    "study.sampler.name": "random",
    "study.sampler.seed": 3,
    "study.pruner.name": "none",
    "study.slow_ratio": 3.0,
    "study.skip_slow": False,
    "study.seed": 7,
    "study.timeout": 60.0,
    "study.max_retries": 0,
    "systems.device": "cpu",
}


def _edited(changes: dict) -> dict:
    return edited(BASE, changes)


def _hpo_run(tmp: Path, space: dict, *extra: str) -> subprocess.CompletedProcess:
    write_space(tmp / "space.yaml", space)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), str(ROOT / "tests")]))
    cmd = [sys.executable, "-m", "hpo.app.cli", "run", "space.yaml", "--storage", _url(tmp), "--workers", "0", *extra]
    return subprocess.run(cmd, cwd=tmp, env=env, capture_output=True, text=True, timeout=120)


def _url(tmp: Path) -> str:
    return f"sqlite:///{tmp / 'edits.db'}"


def _digest(tmp: Path) -> str:
    return hashlib.sha256((tmp / "edits.db").read_bytes()).hexdigest()


def _budget(tmp: Path) -> tuple[int, int]:
    storage = open_storage(_url(tmp))
    state = TicketBudget(engine_of(storage), "edits").state()
    engine_of(storage).dispose()
    return state


@pytest.fixture
def study_dir(tmp_path) -> Path:
    created = _hpo_run(tmp_path, BASE)
    assert created.returncode == 0, created.stderr
    return tmp_path


def test_a_plain_resume_changes_nothing_and_says_nothing(study_dir):
    run = _hpo_run(study_dir, BASE)
    assert run.returncode == 0, run.stderr
    assert "->" not in run.stderr
    assert _budget(study_dir) == (0, 5)


def test_each_edited_setting_is_applied_and_named_with_both_values(study_dir):
    run = _hpo_run(study_dir, _edited(SETTINGS))
    assert run.returncode == 0, run.stderr
    base = {"study.sampler.name": "tpe", "study.sampler.seed": 0, "study.pruner.name": "median", "study.slow_ratio": 5.0}
    base |= {"study.skip_slow": True, "study.seed": 0, "study.timeout": "(unset)", "study.max_retries": 2}
    base |= {"systems.device": "auto"}
    for key, new in SETTINGS.items():
        lines = [line for line in run.stderr.splitlines() if f": {key}: " in line]
        assert len(lines) == 1, run.stderr
        assert f"{key}: {base[key]} -> {new}" in lines[0] and "applied" in lines[0]
    # What workers read from now on is the edited file: the sampler, pruner and settings.
    storage = open_storage(_url(study_dir))
    study, space = open_hpo_study(storage, "edits")
    assert isinstance(study.sampler.base, optuna.samplers.RandomSampler)
    assert isinstance(study.pruner, optuna.pruners.NopPruner)
    assert (space.study.slow_ratio, space.study.skip_slow, space.study.seed) == (3.0, False, 7)
    assert (space.study.timeout, space.study.max_retries, space.spec.systems.device) == (60.0, 0, "cpu")
    engine_of(storage_of(study)).dispose()


@pytest.mark.parametrize(
    "changes,says",
    [
        (
            {"study.objectives": ["val_accuracy"], "study.directions": ["maximize"]},
            "(differs in directions, objectives) than space.yaml: study.directions: ['minimize'] -> ['maximize']",
        ),
        ({"params.lr.high": 0.1}, "(differs in params) than space.yaml: params.lr.high: 0.01 -> 0.1"),
        ({"workload.max_steps": 4}, "(differs in workload) than space.yaml: workload.max_steps: 2 -> 4"),
        ({"systems.attention": ["eager", "sdpa"]}, "(differs in systems) than space.yaml: systems.attention: eager ->"),
    ],
)
def test_a_change_that_makes_another_study_is_refused_and_writes_nothing(study_dir, changes, says):
    before = _digest(study_dir)
    run = _hpo_run(study_dir, _edited({**changes, "study.sampler.name": "random"}))
    assert run.returncode == 2 and "Traceback" not in run.stderr
    (line,) = run.stderr.strip().splitlines()
    assert line.startswith("hpo run: error: study 'edits' exists with a different search space") and says in line, line
    assert _digest(study_dir) == before


def test_the_budget_follows_n_trials_but_never_drops_below_the_claimed_trials(study_dir):
    storage = open_storage(_url(study_dir))
    tickets = TicketBudget(engine_of(storage), "edits")
    assert tickets.claim() and tickets.claim()  # two trials claimed (running or done)
    engine_of(storage).dispose()

    before = _digest(study_dir)
    refused = _hpo_run(study_dir, BASE, "--n-trials", "1")
    assert refused.returncode == 2
    (line,) = refused.stderr.strip().splitlines()
    assert "--n-trials 1: study 'edits' has already claimed 2 trials of its budget of 5" in line
    assert "ask for 2 or more" in line and _digest(study_dir) == before

    lowered = _hpo_run(study_dir, BASE, "--n-trials", "3")
    assert lowered.returncode == 0, lowered.stderr
    assert "study 'edits': n_trials: 5 -> 3 (the trial budget; 2 claimed so far)" in lowered.stderr
    assert _budget(study_dir) == (2, 3)

    edited = _hpo_run(study_dir, _edited({"study.n_trials": 8}))  # the file's own n_trials, edited
    assert edited.returncode == 0, edited.stderr
    assert "n_trials: 3 -> 8" in edited.stderr and _budget(study_dir) == (2, 8)

    flagged = _hpo_run(study_dir, _edited({"study.n_trials": 9}), "--n-trials", "8")  # the flag wins
    assert flagged.returncode == 0, flagged.stderr
    assert "study.n_trials: 8 -> 9 (edited in space.yaml; the trial budget already is 8)" in flagged.stderr
    assert _budget(study_dir) == (2, 8)
