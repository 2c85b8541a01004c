"""hpo as a library, driven as a user would: `hpo.run_study` runs a study from a dict or a file as
`hpo run` does, and `hpo.Objective` runs hpo's trials in a study the user drives with their own
sampler and callbacks. Both store the records `hpo run` stores, and report a rejected trial to
Optuna as `hpo run` does."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import optuna
import pytest
from space_files import write_space

import hpo
from hpo.app.cli import main
from hpo.errors import TrialError, UserInputError

ROOT = Path(__file__).resolve().parents[1]
# skip_slow off: a toy step takes milliseconds, too few to time against the reference reliably.
SPACE = {
    "study": {
        "name": "api",
        "sampler": {"name": "random", "seed": 0},
        "pruner": {"name": "none"},
        "n_trials": 2,
        "skip_slow": False,
    },
    "workload": {"name": "toy_workloads:Toy", "max_steps": 3, "eval_every": 3, "n_blocks": 1},
    "params": {"lr": {"low": 1e-3, "high": 1e-2, "log": True}},
    "systems": {"precision": "fp32", "attention": "eager", "optimizer": "forloop", "compile_backend": "eager"},
}
# Activations past fp16's range: every fp16 trial is rejected (incompatible), fp32 trains (the
# space of tests/study/test_rejected_trials.py, which shows the same of `hpo run`).
REJECTING = {
    **SPACE,
    "workload": {**SPACE["workload"], "overflow": 1.0e5, "n_blocks": 2},
    "systems": {**SPACE["systems"], "precision": ["fp16", "fp32"], "optimizer": "fused"},
}


def _keys(trial: optuna.trial.FrozenTrial) -> set[str]:
    return set(trial.user_attrs)


@pytest.fixture(scope="module")
def cli_trial(tmp_path_factory) -> optuna.trial.FrozenTrial:
    """A trial `hpo run` trained, in this process (`--in-process`), to compare the records with."""
    folder = tmp_path_factory.mktemp("cli")
    url = f"sqlite:///{folder / 'cli.db'}"
    assert main(["run", str(write_space(folder / "space.yaml", SPACE)), "--storage", url, "--in-process", "--n-trials", "1"]) == 0
    (trial,) = optuna.load_study(study_name="api", storage=url).trials
    assert trial.state == optuna.trial.TrialState.COMPLETE and trial.user_attrs["verdict"] == "ok"
    return trial


@pytest.mark.slow
def test_run_study_stores_the_records_hpo_run_stores(tmp_path, cli_trial):
    url = f"sqlite:///{tmp_path / 'lib.db'}"
    space = str(write_space(tmp_path / "space.yaml", SPACE))  # a dict is as good: see the Objective's tests
    study = hpo.run_study(space, storage=url, study_name="from-python", n_trials=1, in_process=True)
    assert isinstance(study, optuna.Study) and study.study_name == "from-python"
    (trial,) = optuna.load_study(study_name="from-python", storage=url).trials  # stored, not only in memory
    assert trial.state == optuna.trial.TrialState.COMPLETE and trial.user_attrs["verdict"] == "ok"
    assert _keys(trial) == _keys(cli_trial)


def test_run_study_refuses_bad_input_before_anything_is_stored(tmp_path):
    url = f"sqlite:///{tmp_path / 'none.db'}"
    with pytest.raises(UserInputError, match="--workers must be >= 0"):
        hpo.run_study(SPACE, storage=url, workers=-1)
    with pytest.raises(UserInputError, match="study.sampler"):
        hpo.run_study({**SPACE, "study": {**SPACE["study"], "sampler": {"name": "annealing"}}}, storage=url)
    assert not (tmp_path / "none.db").exists()


@pytest.mark.slow
def test_objective_runs_in_the_users_study_with_their_sampler_and_callbacks(tmp_path, cli_trial):
    sampled, finished = [], []

    class Recording(optuna.samplers.RandomSampler):
        def sample_independent(self, study, trial, param_name, param_distribution):
            sampled.append(param_name)
            return super().sample_independent(study, trial, param_name, param_distribution)

    objective = hpo.Objective(SPACE)
    study = optuna.create_study(
        storage=f"sqlite:///{tmp_path / 'mine.db'}", directions=objective.directions, sampler=Recording(seed=3)
    )
    study.optimize(objective, n_trials=2, callbacks=[lambda study, trial: finished.append(trial.number)])
    assert sampled == ["lr", "lr"] and finished == [0, 1]
    assert isinstance(study.sampler, Recording)  # still the user's: hpo's workers wrap theirs, this does not
    assert all(t.state == optuna.trial.TrialState.COMPLETE and t.user_attrs["verdict"] == "ok" for t in study.trials)
    assert _keys(study.trials[0]) == _keys(cli_trial)  # each its study's first trial


def test_objective_reports_a_knob_verdict_as_hpo_run_does(tmp_path):
    """A rejected knob ends COMPLETE with the worst value and a violated constraint, so the user's
    sampler learns to avoid it (as `tests/study/test_rejected_trials.py` shows for `hpo run`)."""
    objective = hpo.Objective(REJECTING)
    study = optuna.create_study(directions=objective.directions, sampler=optuna.samplers.RandomSampler(seed=0))
    study.enqueue_trial({"precision": "fp16", "lr": 2e-3})
    study.enqueue_trial({"precision": "fp32", "lr": 3e-3})
    study.optimize(objective, n_trials=2)
    rejected, trained = study.trials
    assert rejected.state == optuna.trial.TrialState.COMPLETE and rejected.value == math.inf
    assert rejected.user_attrs["verdict"].startswith("incompatible") and rejected.system_attrs["constraints"] == [1.0]
    assert trained.user_attrs["verdict"] == "ok" and math.isfinite(trained.value) and trained.system_attrs["constraints"] == [0.0]


def test_objective_ends_an_error_fail_with_its_record_and_queues_no_retry(tmp_path):
    """An error is no verdict on the knobs: the trial records it and ends FAIL. The user owns the
    loop, so hpo queues no retry of its own in their study; Optuna raises it unless caught."""
    faulty = {**SPACE, "workload": {**SPACE["workload"], "name": "fault_workloads:Faulty", "fault": "loss_in_training"}}
    objective = hpo.Objective(faulty)
    study = optuna.create_study(storage=f"sqlite:///{tmp_path / 'err.db'}", directions=objective.directions)
    study.optimize(objective, n_trials=1, catch=(Exception,))
    (trial,) = study.trials  # no WAITING retry beside it
    assert trial.state == optuna.trial.TrialState.FAIL and trial.user_attrs["verdict"].startswith("error: ValueError")
    assert {"error_traceback", "error_signature", "worker"} <= _keys(trial)
    with pytest.raises(TrialError):
        study.optimize(objective, n_trials=1)


def test_objective_refuses_a_study_whose_directions_are_not_the_spaces():
    objective = hpo.Objective(SPACE)
    study = optuna.create_study(direction="maximize")
    with pytest.raises(
        UserInputError, match=r"directions must be the space's study.directions \['minimize'\], got \['maximize'\]"
    ):
        study.optimize(objective, n_trials=1)
    assert study.trials[0].state == optuna.trial.TrialState.FAIL


def test_import_hpo_stays_light_until_a_call_is_used():
    script = (
        "import json, sys, hpo; light = [m for m in ('torch', 'optuna') if m in sys.modules]; "
        "hpo.run_study, hpo.Objective; print(json.dumps([light, 'torch' in sys.modules, sorted(hpo.__all__)]))"
    )
    done = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == [[], False, ["CONFIG_FORMAT", "Objective", "__version__", "run_study"]]
