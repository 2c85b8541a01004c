"""Time budgets and targets: a trial trains until its budget or target, evaluates at shared marks of
training time, records what it ran, exports as the steps it ran, and is judged on what its knobs buy."""

from __future__ import annotations

import math
import os
import statistics
import subprocess
import sys
from pathlib import Path

import optuna
import pytest
import torch
import yaml

from hpo.config.resolve import build_config
from hpo.config.space import parse_space
from hpo.config.trial import Knobs
from hpo.records import check_trial_attrs
from hpo.runtime import run_worker
from hpo.study import create_or_resume
from hpo.trial import execute
from hpo.verify.stored import MemoryVerdicts

ROOT = Path(__file__).resolve().parents[2]


def _space(**workload) -> dict:
    return {
        "study": {"name": "budget", "sampler": {"name": "random", "seed": 0}, "pruner": {"name": "none"}, "n_trials": 2,
                  "skip_slow": False},
        "workload": {"name": "toy_workloads:Toy", "max_steps": 100000, "eval_every": 1000, "n_blocks": 2, **workload},
        "params": {"lr": 3e-3, "batch_size": 16},
        "systems": {"precision": "fp32", "attention": "eager", "optimizer": "forloop", "compile_backend": "eager"},
    }  # fmt: skip


def _execute(space: dict, knobs: Knobs | None = None, on_eval=None):
    parsed = parse_space(space, source="test")
    config = build_config(
        parsed, {"lr": 3e-3, "batch_size": 16}, knobs or Knobs(precision="fp32", attention="eager", optimizer="forloop")
    )
    return config, execute(config, MemoryVerdicts(), on_eval=on_eval)


def test_a_budget_ends_training_and_evaluations_fall_on_shared_marks_of_training_time():
    reports = []
    config, outcome = _execute(_space(budget_s=0.6), on_eval=lambda step, metrics: reports.append(step))
    attrs = outcome.attrs
    assert outcome.ok and 0 < attrs["steps_run"] < 100000
    assert attrs["train_s"] >= 0.6  # stops at the first step past the budget
    # Evaluations at marks of budget_s / 4, reported in ms, the same for every trial; a step that
    # passes several marks evaluates once. The last one is the budget itself.
    assert set(reports) <= {150, 300, 450, 600} and reports == sorted(reports) and reports[-1] == 600
    assert attrs["trial_s"] > attrs["train_s"]  # probe, build and evaluation are not training time
    check_trial_attrs(attrs | {"verdict": str(outcome.verdict)})


@pytest.mark.slow
def test_a_target_stops_training_and_an_unreached_one_is_never_a_success():
    space = _space(max_steps=400, eval_every=10, target={"val_loss": 0.72})
    space["study"].update(objectives=["time_to_target_s"], directions=["minimize"])
    _, reached = _execute(space)
    assert reached.attrs["target_reached"] and reached.attrs["steps_run"] < 400
    assert reached.values == [pytest.approx(reached.attrs["time_to_target_s"])] and reached.values[0] > 0
    space["workload"]["target"] = {"val_loss": 0.0}  # unreachable
    _, missed = _execute(space)
    assert missed.ok and missed.attrs["target_reached"] is False and missed.attrs["time_to_target_s"] is None
    assert missed.values == [math.inf] and missed.attrs["steps_run"] == 400


def test_systems_metrics_are_objectives_and_every_trial_records_flops_and_mfu():
    space = _space(max_steps=6, eval_every=3)
    space["study"].update(objectives=["val_loss", "train_samples_per_s", "mfu"], directions=["minimize", "maximize", "maximize"])
    _, outcome = _execute(space)
    attrs = outcome.attrs
    assert outcome.values == [attrs["metrics"]["val_loss"], attrs["train_samples_per_s"], attrs["mfu"]]
    assert attrs["model_flops_per_sample"] > 0 and attrs["mfu"] == pytest.approx(attrs["achieved_tflops"] / attrs["peak_tflops"])
    assert attrs["peak_source"].startswith("measured")


def _hpo(*args, cwd: Path) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), str(ROOT / "tests")]), KINETO_LOG_LEVEL="5")
    return subprocess.run(
        [sys.executable, "-m", "hpo.app.cli", *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=600
    )


@pytest.mark.slow
def test_a_budget_trial_exports_as_the_steps_it_ran_and_retrains_to_the_same_metric(tmp_path):
    (tmp_path / "space.yaml").write_text(yaml.safe_dump(_space(budget_s=0.5)))
    assert _hpo("run", "space.yaml", "--in-process", "--n-trials", "1", cwd=tmp_path).returncode == 0
    study = optuna.load_study(study_name="budget", storage=f"sqlite:///{tmp_path / 'studies' / 'budget.db'}")
    trial = study.trials[0]
    assert _hpo("export", "--study", "budget", "-o", "best.yaml", cwd=tmp_path).returncode == 0
    exported = yaml.safe_load((tmp_path / "best.yaml").read_text())
    assert exported["workload"]["max_steps"] == trial.user_attrs["steps_run"] and "budget_s" not in exported["workload"]
    train = _hpo("train", "best.yaml", "--json", cwd=tmp_path)
    assert train.returncode == 0, train.stderr[-2000:]
    assert yaml.safe_load(train.stdout)["values"][0] == pytest.approx(trial.value, rel=1e-6)


@pytest.mark.slow
def test_under_a_budget_the_faster_knob_runs_more_steps_and_reaches_a_lower_loss(tmp_path):
    """Gradient checkpointing recomputes every block: slower per step on any host. With the same
    time budget and learning rate, the run without it trains more steps and, on a model that is still
    learning fast (a small causal LM at its first few hundred steps), ends lower."""
    space = _space(budget_s=1.5)
    space["workload"] = {
        "name": "causal_lm",
        "max_steps": 100000,
        "eval_every": 1000,
        "budget_s": 1.5,
        "d_model": 64,
        "n_layers": 2,
        "n_heads": 4,
        "seq_len": 64,
        "corpus_bytes": 60000,
        "eval_batches": 2,
    }
    # At lr 1e-2 both runs reach the loss's early plateau (about 2.25) within the budget, where more
    # steps no longer lower it (CI once read 2.28456 against 2.28449); at 2e-3 the model is still
    # learning: 87-90 steps reached 2.415-2.445 against 65-69 steps at 2.48-2.52, one thread here.
    space["params"] = {"lr": 2.0e-3, "batch_size": 16}
    space["systems"]["grad_checkpointing"] = [False, True]
    order = [False, True, False, True, False]  # the first warms the process up; then interleaved
    space["study"]["n_trials"] = len(order)
    url = f"sqlite:///{tmp_path / 'b.db'}"
    study = create_or_resume(parse_space(space, source="test"), url)
    for ckpt in order:
        study.enqueue_trial({"grad_checkpointing": ckpt})
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # one thread: a busy shared machine then slows both knobs alike
    try:
        run_worker(study, url, isolate=False)
    finally:
        torch.set_num_threads(threads)
    runs = {ckpt: [t for t in study.trials[1:] if t.params["grad_checkpointing"] is ckpt] for ckpt in (False, True)}
    steps = {ckpt: statistics.median(t.user_attrs["steps_run"] for t in trials) for ckpt, trials in runs.items()}
    loss = {ckpt: statistics.median(t.value for t in trials) for ckpt, trials in runs.items()}
    assert steps[False] > steps[True], steps
    assert loss[False] < loss[True], loss
