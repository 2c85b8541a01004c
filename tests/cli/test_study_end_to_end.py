"""A real study through the CLI, in a temporary SQLite database, read back with Optuna's own API;
then best --json, export, and train reproducing the trial's metric."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import optuna
import pytest
import yaml

from hpo.knobs.systems import TRIAL_KNOBS
from hpo.records import check_trial_attrs

ROOT = Path(__file__).resolve().parents[2]
SPACE = {
    "study": {
        "name": "e2e",
        "objectives": ["val_loss", "val_perplexity"],
        "directions": ["minimize", "minimize"],
        "sampler": {"name": "tpe", "seed": 0, "n_startup_trials": 3},
        "pruner": {"name": "none"},
        "n_trials": 4,
    },
    "workload": {
        "name": "causal_lm",
        "max_steps": 8,
        "eval_every": 4,
        "d_model": 32,
        "n_layers": 1,
        "n_heads": 2,
        "seq_len": 32,
        "corpus_bytes": 60000,
        "eval_batches": 2,
    },
    "params": {"lr": {"low": 1e-3, "high": 1e-2, "log": True}, "batch_size": 8},
    "systems": {
        "precision": ["fp32", "bf16"],
        "attention": ["eager", "sdpa"],
        "optimizer": ["forloop", "fused"],
        "grad_checkpointing": [False, True],
        "compile": False,
    },
}
# Retraining on CPU with the same seed must give the same metric; the bound we hold ourselves to.
REPRODUCTION_TOLERANCE = 1e-6


def hpo(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), str(ROOT / "tests")]), KINETO_LOG_LEVEL="5")
    return subprocess.run(
        [sys.executable, "-m", "hpo.app.cli", *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=600
    )


@pytest.mark.slow
def test_run_best_export_train(tmp_path):
    space_file = tmp_path / "space.yaml"
    space_file.write_text(yaml.safe_dump(SPACE))
    assert hpo("validate", str(space_file), cwd=tmp_path).returncode == 0

    run = hpo("run", str(space_file), "--in-process", cwd=tmp_path)
    assert run.returncode == 0, run.stderr
    assert "trial #3 (4 of 4)" in run.stderr and "step 8/8" in run.stderr  # progress lines
    db = tmp_path / "studies" / "e2e.db"
    assert db.exists()

    study = optuna.load_study(study_name="e2e", storage=f"sqlite:///{db}")
    trials = study.get_trials()
    assert len(trials) == 4
    for t in trials:
        attrs = t.user_attrs
        check_trial_attrs(attrs)  # every key declared in the one record schema, with its type
        assert set(attrs["knobs_requested"]) == set(TRIAL_KNOBS)
        assert attrs["config"]["systems"] == attrs["knobs_requested"]
        for key in ("verdict", "knobs_observed", "device", "torch_version", "hpo_version"):
            assert key in attrs
        if attrs["verdict"] == "ok":
            observed = attrs["knobs_observed"]
            assert observed["precision"] == attrs["knobs_requested"]["precision"]
            assert observed["grad_checkpointing"] == attrs["knobs_requested"]["grad_checkpointing"]
            assert attrs["train_samples_per_s"] > 0 and attrs["step_time_ms"] > 0 and attrs["n_params"] > 0
    assert study.metric_names == ["val_loss", "val_perplexity"]
    # The in-process worker runs the reference's compared step once; later probes of the model read it.
    probed = [t.user_attrs["probe_reference_reused"] for t in trials if t.user_attrs.get("probe_cached") is False]
    assert probed[0] is False and all(probed[1:]), probed

    table = hpo("best", "--study", "e2e", cwd=tmp_path)
    assert table.returncode == 0, table.stderr
    assert table.stdout.startswith("Pareto front of study 'e2e'")
    header = table.stdout.splitlines()[1].split()
    assert header[:3] == ["trial", "val_loss", "val_perplexity"] and "samples/s" in header and "MFU" in header
    within = hpo("best", "--study", "e2e", "--within", "1000", "--json", cwd=tmp_path)
    trained = [t for t in trials if t.user_attrs["verdict"] == "ok"]
    fastest = max(trained, key=lambda t: t.user_attrs["train_samples_per_s"])
    assert [t["number"] for t in json.loads(within.stdout)] == [fastest.number]  # 1000%: every trial qualifies
    top = hpo("export", "--study", "e2e", "--top", "2", "-o", "top", cwd=tmp_path)
    assert top.returncode == 0, top.stderr
    assert len(list((tmp_path / "top").glob("trial-*.yaml"))) == min(2, len(trained))

    best = hpo("best", "--study", "e2e", "--json", cwd=tmp_path)
    assert best.returncode == 0, best.stderr
    front = json.loads(best.stdout)
    assert front and {"number", "values", "params", "user_attrs"} <= set(front[0])
    chosen = front[0]

    out = tmp_path / "best.yaml"
    export = hpo("export", "--study", "e2e", "--trial", str(chosen["number"]), "-o", str(out), cwd=tmp_path)
    assert export.returncode == 0, export.stderr
    exported = yaml.safe_load(out.read_text())
    assert exported["systems"] == chosen["user_attrs"]["knobs_requested"]
    assert exported["format"] == 2 and exported["study"]["seed"] == 0 and exported["workload"]["name"] == "causal_lm"

    train = hpo("train", str(out), "--json", cwd=tmp_path)
    assert train.returncode == 0, train.stderr
    result = json.loads(train.stdout)
    assert result["objectives"] == ["val_loss", "val_perplexity"]
    for got, want in zip(result["values"], chosen["values"]):
        assert abs(got - want) <= REPRODUCTION_TOLERANCE * abs(want), (got, want)
    assert result["user_attrs"]["knobs_observed"] == chosen["user_attrs"]["knobs_observed"]
