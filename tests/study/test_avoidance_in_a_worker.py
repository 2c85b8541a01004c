"""A worker records an incompatible combination as a COMPLETE trial with a violated constraint and
an infinite value (Optuna's samplers learn nothing from FAIL trials: optuna/optuna#2864), labelled
with what happened, and hpo's avoidance wrapper (hpo.study._avoid), which every study's sampler goes
through, never proposes it again. That TPE itself reads the constraint is
tests/study/test_constraints_teach_samplers.py's job; this test does not separate the two."""

from __future__ import annotations

import optuna
import pytest

from hpo.config.space import parse_space
from hpo.runtime import run_worker
from hpo.study import create_or_resume

SPACE = {
    "study": {
        "name": "learns",
        "objectives": ["val_loss"],
        "directions": ["minimize"],
        "sampler": {"name": "tpe", "seed": 1, "n_startup_trials": 4},
        "pruner": {"name": "none"},
        "n_trials": 16,
        # Speed unjudged: on a CPU that emulates fp16 a machine fact would reject it as slow first.
        "skip_slow": False,
    },
    # overflow=1e5 pushes activations past fp16's range: every fp16 trial is incompatible.
    "workload": {"name": "toy_workloads:Toy", "max_steps": 3, "eval_every": 3, "overflow": 1.0e5, "n_blocks": 2},
    "params": {"lr": {"low": 1e-3, "high": 1e-2, "log": True}},
    "systems": {"precision": ["fp16", "fp32", "bf16"], "attention": "eager", "optimizer": "fused"},
}


@pytest.mark.slow
def test_a_worker_records_an_always_failing_precision_and_the_avoidance_never_proposes_it_again(tmp_path):
    space = parse_space(SPACE, source="test")
    url = f"sqlite:///{tmp_path / 'learns.db'}"
    study = create_or_resume(space, url)
    run_worker(study, url, isolate=False)
    trials = study.get_trials()
    assert len(trials) == 16
    fp16 = [t for t in trials if t.params["precision"] == "fp16"]
    assert fp16, "the startup trials should have tried fp16"
    for t in fp16:
        assert t.user_attrs["verdict"].startswith("incompatible: non-finite")
        assert t.constraints == {"0": 1.0} and t.state == optuna.trial.TrialState.COMPLETE
        assert t.value == float("inf")  # never better than a trial that trained
    # After the first fp16 verdict, fp16 is never proposed again: the wrapper mends any proposal of it.
    first = fp16[0].number
    assert [t.number for t in fp16] == [first], [t.params["precision"] for t in trials]
    assert first < 10
    best = study.best_trial
    assert best.params["precision"] != "fp16" and best.user_attrs["verdict"] == "ok"
