"""The no-code path through the CLI: a local checkpoint folder and two CSV files, a short YAML file,
`hpo run`, then `hpo export --as hf` and the user's own Trainer built from what it wrote."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import optuna
import pytest
import yaml
from hf_fixtures import tiny_bert, topic_files
from space_files import write_space

ROOT = Path(__file__).resolve().parents[2]


def hpo(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), str(ROOT / "tests")]), KINETO_LOG_LEVEL="5")
    return subprocess.run(
        [sys.executable, "-m", "hpo.app.cli", *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=600
    )


def space(tmp_path: Path, **workload) -> Path:
    train, val = topic_files(tmp_path)
    raw = {
        "study": {"name": "hf", "objectives": ["val_f1"], "directions": ["maximize"], "n_trials": 1},
        "workload": {
            "name": "hf_text_classification",
            "model_name_or_path": "model",  # relative to where hpo runs, as with run_glue.py
            "train_file": train.name,
            "validation_file": val.name,
            "cache_dir": "cache",
            "max_steps": 3,
            "eval_every": 3,
            **workload,
        },
        "params": {"lr": 1e-3, "batch_size": 4},
        "systems": {"precision": "fp32", "attention": "sdpa", "optimizer": "fused", "grad_checkpointing": True, "compile": False},
    }
    return write_space(tmp_path / "space.yaml", raw)


@pytest.mark.parametrize(
    "change, words",
    [
        # Offline (tests/conftest.py) with an empty hub cache: a hub id is looked up there, not downloaded.
        ({"model_name_or_path": "sentence-transformers/all-MiniLM-L6-v2"}, "is not in the Hugging Face cache"),
        ({"label_column": "topic"}, "label_column: column 'topic' is not in train_file"),
    ],
)
def test_validate_refuses_in_one_line(tmp_path, monkeypatch, change, words):
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    path = space(tmp_path, **change)
    (tmp_path / "model").mkdir()
    (tmp_path / "model" / "config.json").write_text("{}")
    result = hpo("validate", str(path), cwd=tmp_path)
    assert result.returncode == 2, result.stderr
    assert words in result.stderr and len(result.stderr.strip().splitlines()) == 1


@pytest.mark.slow
def test_run_then_export_as_hf_reproduces_the_observed_knobs(tmp_path):
    tiny_bert(tmp_path / "model")
    path = space(tmp_path)
    storage = f"sqlite:///{tmp_path / 'hf.db'}"
    result = hpo("run", str(path), "--storage", storage, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    trial = optuna.load_study(study_name="hf", storage=storage).trials[0]
    observed = trial.user_attrs["knobs_observed"]
    assert trial.user_attrs["verdict"] == "ok" and observed["grad_checkpointing"] is True
    assert observed["attention"] == "sdpa_flash" and observed["optimizer"] == "fused"
    assert set(trial.user_attrs["metrics"]) == {"val_accuracy", "val_f1", "val_loss"}
    assert list((tmp_path / "cache").glob("*.pt"))  # the tokenized data, for the trials after the first

    result = hpo("export", "--study", "hf", "--storage", storage, "--as", "hf", "-o", "out", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    args = json.loads((tmp_path / "out" / "training_args.json").read_text())
    assert args["optim"] == "adamw_torch_fused" and args["bf16"] is False and args["max_steps"] == 3
    assert json.loads((tmp_path / "out" / "model_kwargs.json").read_text()) == {"attn_implementation": "sdpa"}
    assert "SDPBackend.FLASH_ATTENTION" in (tmp_path / "out" / "NOTES.txt").read_text()
    # The user's own Trainer, built from those files, runs what the trial was observed to run.
    from hf_evidence import run_hf_trainer

    from hpo.app.export_as import winner_of
    from hpo.workloads.catalog import create_workload

    workload = create_workload("hf_text_classification", {**_options(path, tmp_path)})
    seen, recompute, targs = run_hf_trainer(tmp_path / "out", workload, tmp_path / "trainer", winner_of(trial))
    assert targs.optim == "adamw_torch_fused"
    for knob in ("precision", "attention", "optimizer"):
        assert seen[knob] == observed[knob], (knob, seen, observed)
    assert recompute.backward_runs > 0  # checkpointing: the Trainer's step recomputed the layers

    snippet = hpo("export", "--study", "hf", "--storage", storage, "--as", "python", cwd=tmp_path)
    assert snippet.returncode == 0 and "fused=True" in snippet.stdout
    compile(snippet.stdout, "<snippet>", "exec")


def test_export_as_refuses_a_trial_without_observed_knobs(tmp_path):
    storage = f"sqlite:///{tmp_path / 'x.db'}"
    study = optuna.create_study(study_name="x", storage=storage)
    trial = optuna.trial.create_trial(value=1.0, user_attrs={"config": {"workload": {"max_steps": 1}}, "knobs_requested": {}})
    study.add_trial(trial)
    result = hpo("export", "--study", "x", "--storage", storage, "--trial", "0", "--as", "hf", "-o", "out", cwd=tmp_path)
    assert result.returncode == 2 and "no evidence for" in result.stderr, result.stderr
    assert len(result.stderr.strip().splitlines()) == 1 and not (tmp_path / "out").exists()


def _options(path: Path, folder: Path) -> dict:
    """The space file's workload options, with its relative paths made absolute."""
    raw = yaml.safe_load(path.read_text())["workload"]
    options = {k: v for k, v in raw.items() if k not in ("name", "max_steps", "eval_every")}
    for key in ("model_name_or_path", "train_file", "validation_file", "cache_dir"):
        options[key] = str(folder / options[key])
    return options
