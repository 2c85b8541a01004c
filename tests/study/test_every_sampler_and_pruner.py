"""Every sampler and pruner the schema accepts runs a real study on a toy workload: trials
complete, a knob value known to fail is not proposed again, and pruned trials end PRUNED at their
step."""

from __future__ import annotations

import optuna
import pytest
from optuna.trial import TrialState

from hpo.config.schema import PrunerName, SamplerName
from hpo.config.space import parse_space
from hpo.runtime import run_worker
from hpo.study import create_or_resume

SAMPLER_NAMES = list(SamplerName.__args__)
PRUNER_NAMES = list(PrunerName.__args__)


def _space(name: str, sampler: str, pruner: str, n_trials: int, max_steps: int = 3) -> dict:
    return {
        "study": {"name": name, "sampler": {"name": sampler, "seed": 0}, "pruner": {"name": pruner}, "n_trials": n_trials},
        # overflow pushes activations past fp16's range: every fp16 trial is incompatible.
        "workload": {"name": "toy_workloads:Toy", "max_steps": max_steps, "eval_every": 1, "overflow": 1.0e5, "n_blocks": 2},
        "params": {"lr": {"low": 1e-4, "high": 3e-2, "log": True}, "dropout": {"low": 0.0, "high": 0.3}},
        "systems": {
            "precision": ["fp16", "fp32"],
            "attention": ["eager", "sdpa"],
            "optimizer": "fused",
            "compile_backend": "eager",
        },
    }


def _run(tmp_path, space: dict) -> list[optuna.trial.FrozenTrial]:
    url = f"sqlite:///{tmp_path / 'study.db'}"
    study = create_or_resume(parse_space(space, source="test"), url)
    run_worker(study, url, isolate=False)
    return study.get_trials()


def test_the_lists_match_the_schema():
    from hpo.study import PRUNERS, SAMPLERS

    assert set(SAMPLERS) == set(SAMPLER_NAMES) and set(PRUNERS) == set(PRUNER_NAMES)


@pytest.mark.slow
@pytest.mark.filterwarnings("error::FutureWarning")  # a deprecated sampler argument would warn every user
@pytest.mark.parametrize("sampler", SAMPLER_NAMES)
def test_every_sampler_runs_a_study_and_never_returns_to_a_failed_precision(tmp_path, sampler):
    trials = _run(tmp_path, _space(f"s-{sampler}", sampler, "none", n_trials=8))
    assert len(trials) == 8 and all(t.state == TrialState.COMPLETE for t in trials)
    assert any(t.user_attrs["verdict"] == "ok" for t in trials)
    fp16 = [t.number for t in trials if t.params["precision"] == "fp16"]
    assert len(fp16) <= 1, f"{sampler} proposed fp16 again after it failed: trials {fp16}"
    for t in trials:
        if t.params["precision"] == "fp16":
            assert t.user_attrs["verdict_implicates"] == [["precision", "fp16"]]


@pytest.mark.slow
@pytest.mark.parametrize("pruner", PRUNER_NAMES)
def test_every_pruner_runs_a_study_and_pruned_trials_end_at_their_step(tmp_path, pruner):
    space = _space(f"p-{pruner}", "random", pruner, n_trials=10, max_steps=8)
    space["systems"]["precision"] = "fp32"  # every trial trains: only the pruner stops them
    trials = _run(tmp_path, space)
    assert len(trials) == 10 and any(t.state == TrialState.COMPLETE for t in trials)
    pruned = [t for t in trials if t.state == TrialState.PRUNED]
    for t in pruned:
        step = max(t.intermediate_values)
        assert t.user_attrs["verdict"] == f"pruned: step {step}" and step < 8
    if pruner == "none":
        assert not pruned
    else:
        assert pruned, f"{pruner} pruned nothing in 10 trials with 8 reports each"
