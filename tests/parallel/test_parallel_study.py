"""A study whose trials are 2-rank trials: `hpo run` searches the strategy, each trial runs as its
ranks, and rank 0's launcher writes one record per trial with what the ranks saw."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import optuna
import pytest
import yaml
from optuna.trial import TrialState
from parallel_ranks import assert_two_ranks_trained, no_rank_left_behind, two_rank_space  # noqa: F401 (autouse)

from hpo.records import check_trial_attrs

ROOT = Path(__file__).resolve().parents[2]
SPACE = two_rank_space("ranks", n_trials=2)


def hpo(folder: Path, *args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), str(ROOT / "tests")]), KINETO_LOG_LEVEL="5")
    return subprocess.run(
        [sys.executable, "-m", "hpo.app.cli", *args], cwd=folder, env=env, capture_output=True, text=True, timeout=600
    )


@pytest.fixture(scope="module")
def study_folder(tmp_path_factory) -> Path:
    """A folder holding the space file and, under studies/, the study `hpo run` ran from it."""
    folder = tmp_path_factory.mktemp("ranks")
    (folder / "s.yaml").write_text(yaml.safe_dump(SPACE))
    done = hpo(folder, "run", "s.yaml", "--in-process")
    assert done.returncode == 0, done.stderr[-2000:]
    return folder


@pytest.mark.slow
def test_a_study_of_two_rank_trials_records_what_the_ranks_ran(study_folder):
    study = optuna.load_study(study_name="ranks", storage=f"sqlite:///{study_folder / 'studies' / 'ranks.db'}")
    trials = study.get_trials(states=[TrialState.COMPLETE])
    assert len(trials) == 2
    for trial in trials:
        check_trial_attrs(trial.user_attrs)
        ranks = trial.user_attrs["parallel"]
        assert_two_ranks_trained(ranks, SPACE)
        collective = "all_reduce" if trial.params["parallel.strategy"] == "ddp" else "reduce_scatter"
        assert ranks["wire"][collective]["dtypes"] == ["float32"]
        assert trial.user_attrs["config"]["systems"]["parallel"]["strategy"] == trial.params["parallel.strategy"]
        assert trial.value == trial.user_attrs["metrics"]["val_loss"]


@pytest.mark.slow
def test_hpo_train_of_the_exported_best_trial_launches_its_ranks(study_folder):
    exported = hpo(study_folder, "export", "--study", "ranks", "-o", "best.yaml")
    assert exported.returncode == 0, exported.stderr[-2000:]
    assert yaml.safe_load((study_folder / "best.yaml").read_text())["systems"]["parallel"]["processes"] == 2
    trained = hpo(study_folder, "train", "best.yaml", "--format", "json")
    assert trained.returncode == 0, trained.stderr[-2000:]
    result = json.loads(trained.stdout)
    assert result["verdict"] == "ok"
    assert_two_ranks_trained(result["user_attrs"]["parallel"], SPACE)
    best = optuna.load_study(study_name="ranks", storage=f"sqlite:///{study_folder / 'studies' / 'ranks.db'}").best_trial
    trained_config, best_config = result["user_attrs"]["config"], best.user_attrs["config"]
    for part in ("workload", "params", "systems"):  # the study part differs: `hpo train` never judges slow
        assert trained_config[part] == best_config[part], part


@pytest.mark.slow
def test_hpo_export_as_python_of_a_two_rank_trial_writes_the_script_and_its_torchrun_command(study_folder):
    best = optuna.load_study(study_name="ranks", storage=f"sqlite:///{study_folder / 'studies' / 'ranks.db'}").best_trial
    assert best.user_attrs["knobs_observed"]["precision"] == "fp32"  # what its ranks were seen to run
    exported = hpo(study_folder, "export", "--study", "ranks", "--as", "python", "-o", "train.py")
    assert exported.returncode == 0, exported.stderr[-2000:]
    script = (study_folder / "train.py").read_text()
    assert f"hpo trial {best.number}" in script
    compile(script, "train.py", "exec")
    torchrun = (study_folder / "train.torchrun.sh").read_text()
    assert "exec torchrun --standalone --nnodes=1 --nproc_per_node=2 train.py" in torchrun
    strategy = best.user_attrs["config"]["systems"]["parallel"]["strategy"]
    assert ("DistributedDataParallel(" if strategy == "ddp" else "fully_shard(") in torchrun
