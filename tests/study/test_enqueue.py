"""Warm start: an exported config becomes a WAITING trial of a study whose space holds it, and the
study builds exactly that config from it; a config outside the space writes nothing."""

from __future__ import annotations

import optuna
import pytest
from key_paths import edited

from hpo.config.space import parse_space
from hpo.errors import UserInputError
from hpo.study import create_or_resume, space_of, suggest_config
from hpo.study._enqueue import enqueue_config, trial_params

SPACE = {
    "study": {"name": "warm", "sampler": {"name": "random", "seed": 3}},
    "workload": {"name": "causal_lm", "max_steps": 4, "d_model": 32, "n_heads": 2},
    "params": {"lr": {"low": 1e-4, "high": 1e-2, "log": True}, "batch_size": {"low": 8, "high": 32, "step": 8}, "dropout": 0.1},
    "systems": {"precision": ["fp32", "bf16"], "attention": "eager", "optimizer": ["forloop", "fused"]},
}


def _export(space, **params) -> dict:
    """What `hpo export` writes for a trial of `space` that took `params`."""
    trial = optuna.trial.FixedTrial({"lr": 1e-3, "batch_size": 16, "precision": "bf16", "optimizer": "fused", **params})
    return suggest_config(trial, space).to_dict()


def test_every_suggested_config_maps_back_to_the_params_that_made_it():
    space = parse_space(SPACE, source="space.yaml")
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=0))
    for _ in range(20):
        trial = study.ask()
        config = suggest_config(trial, space)
        assert trial_params(space, config) == trial.params


def test_an_export_is_enqueued_as_a_waiting_trial(tmp_path):
    space = parse_space(SPACE, source="space.yaml")
    study = create_or_resume(space, f"sqlite:///{tmp_path / 'warm.db'}")
    params = enqueue_config(study, space, parse_space(_export(space, lr=2e-3), source="best.yaml"))
    waiting = study.get_trials(states=[optuna.trial.TrialState.WAITING])
    assert params == {"lr": 2e-3, "batch_size": 16, "precision": "bf16", "optimizer": "fused"}
    assert len(waiting) == 1
    trial = study.ask()  # what a worker does next: it takes the waiting trial
    assert suggest_config(trial, space).to_dict() == _export(space, lr=2e-3) and trial.params == params


def _edit(exported: dict, path: str, value) -> dict:
    return edited(exported, {path: value})


@pytest.mark.parametrize(
    "path,value,message",
    [
        ("params.lr", 0.5, "params.lr: the config has 0.5, outside study 'warm''s range 0.0001..0.01 (log)"),
        ("params.batch_size", 12, "params.batch_size: the config has 12, outside study 'warm''s range 8..32 in steps of 8"),
        ("params.weight_decay", 0.1, "params.weight_decay: the config has 0.1 but study 'warm' fixes 0.0"),
        ("workload.dropout", 0.2, "workload.dropout: the config has 0.2 but study 'warm' fixes 0.1"),
        ("workload.d_model", 64, "workload.d_model: the config has 64 but study 'warm' fixes 32"),
        ("workload.max_steps", 8, "workload.max_steps: the config has 8 but study 'warm' fixes 4"),
        (
            "workload.name",
            "text_classification",
            "workload.name: the config has 'text_classification' but study 'warm' fixes 'causal_lm'",
        ),
        ("systems.attention", "sdpa", "systems.attention: the config has 'sdpa', study 'warm' allows ['eager']"),
        ("systems.compile_backend", "eager", "systems.compile_backend: the config has 'eager' but study 'warm' fixes 'inductor'"),
        ("params.lr", {"low": 1e-3, "high": 2e-3}, "params.lr: a config to train or enqueue holds one value per key"),
    ],
)
def test_a_config_outside_the_space_is_refused_by_key_and_nothing_is_written(tmp_path, path, value, message):
    space = parse_space(SPACE, source="space.yaml")
    study = create_or_resume(space, f"sqlite:///{tmp_path / 'warm.db'}")
    exported = _edit(_export(space), path, value)
    if path == "workload.name":
        exported["workload"] = {"name": value, "model": "tiny"}
        exported["params"].pop("dropout", None)
    with pytest.raises(UserInputError) as info:
        enqueue_config(study, space, parse_space(exported, source="best.yaml"))
    assert str(info.value).startswith(f"best.yaml: {message}"), str(info.value)
    assert study.get_trials() == []


def test_an_edited_export_starts_a_new_study_around_it(tmp_path):
    exported = _export(parse_space(SPACE, source="space.yaml"), lr=2e-3)
    exported["params"]["lr"] = {"low": 1e-3, "high": 4e-3}
    study = create_or_resume(parse_space(exported, source="edited.yaml"), f"sqlite:///{tmp_path / 'new.db'}", "around-best")
    stored = space_of(study)  # what every worker of the study reads back
    config = suggest_config(study.ask(), stored)
    assert 1e-3 <= config.training.lr <= 4e-3 and config.knobs.precision == "bf16"
    assert config.workload_options == {"d_model": 32, "n_heads": 2, "dropout": 0.1}
