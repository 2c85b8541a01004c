"""A study whose trials are 2-rank trials: `hpo run` searches the strategy, each trial runs as its
ranks, and rank 0's launcher writes one record per trial with what the ranks saw."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import optuna
import pytest
import yaml
from optuna.trial import TrialState
from parallel_ranks import no_rank_left_behind  # noqa: F401 (autouse)

from hpo.records import check_trial_attrs

ROOT = Path(__file__).resolve().parents[2]
SPACE = {
    "study": {"name": "ranks", "sampler": {"name": "random", "seed": 0}, "pruner": {"name": "none"}, "n_trials": 2},
    "workload": {
        "name": "causal_lm",
        "max_steps": 3,
        "eval_every": 3,
        "d_model": 16,
        "n_layers": 2,
        "n_heads": 2,
        "seq_len": 16,
        "corpus_bytes": 20000,
        "eval_batches": 2,
    },
    "params": {"lr": {"low": 1e-4, "high": 1e-2, "log": True}, "batch_size": 8},
    "systems": {
        "precision": "fp32",
        "attention": "eager",
        "optimizer": "forloop",
        "compile": False,
        "device": "cpu",
        "parallel": {"processes": 2, "strategy": ["ddp", "fsdp"], "collective_timeout_s": 60},
    },
}


@pytest.mark.slow
def test_a_study_of_two_rank_trials_records_what_the_ranks_ran(tmp_path):
    (tmp_path / "s.yaml").write_text(yaml.safe_dump(SPACE))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), str(ROOT / "tests")]), KINETO_LOG_LEVEL="5")
    done = subprocess.run(
        [sys.executable, "-m", "hpo.app.cli", "run", "s.yaml", "--in-process"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    study = optuna.load_study(study_name="ranks", storage=f"sqlite:///{tmp_path / 'studies' / 'ranks.db'}")
    trials = study.get_trials(states=[TrialState.COMPLETE])
    assert len(trials) == 2
    for trial in trials:
        check_trial_attrs(trial.user_attrs)
        ranks = trial.user_attrs["parallel"]
        assert (ranks["global_batch"], ranks["batch_per_rank_seen"]) == (8, 4)
        assert len(ranks["peak_memory_mb_per_rank"]) == 2
        assert ranks["last_steps"] == {"0": 2, "1": 2}
        collective = "all_reduce" if trial.params["parallel.strategy"] == "ddp" else "reduce_scatter"
        assert ranks["wire"][collective]["dtypes"] == ["float32"]
        assert trial.user_attrs["config"]["systems"]["parallel"]["strategy"] == trial.params["parallel.strategy"]
        assert trial.value == trial.user_attrs["metrics"]["val_loss"]
