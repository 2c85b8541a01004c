"""Warm-start a study: enqueue an exported config's values as a WAITING trial, which the next worker
runs before the sampler proposes anything. The config must be a point of the study's space: the
same workload and fixed values, and every searched value inside its range."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import optuna

from hpo.config.params import Fixed, ParamSpec, contains, describe
from hpo.config.resolve import build_config, fixed_config
from hpo.config.space import SearchSpace, load_space
from hpo.config.trial import TRAINING_KEYS, TrialConfig
from hpo.errors import UserInputError
from hpo.storage import open_storage
from hpo.study._create import open_hpo_study
from hpo.workloads.catalog import parse_options

__all__ = ["enqueue_config", "enqueue_file", "trial_params"]

# TrainingConfig fields that a space sets outside `params:`, by their key path in the file.
_TRAINING_PATHS = {
    "max_steps": "workload.max_steps",
    "eval_every": "workload.eval_every",
    "check_every": "workload.check_every",
    "compile_backend": "systems.compile_backend",
}


def enqueue_file(path: str | Path, study_name: str, storage_url: str) -> dict[str, Any]:
    """`hpo enqueue`: the config file is read and checked before the storage is opened."""
    config_space = load_space(path)
    study, space = open_hpo_study(open_storage(storage_url), study_name)
    return enqueue_config(study, space, config_space)


def enqueue_config(study: optuna.Study, space: SearchSpace, config_space: SearchSpace) -> dict[str, Any]:
    """Enqueue the (fully fixed) config in `config_space` into `study`, whose space is `space`.
    Returns the params enqueued; raises a UserInputError, having written nothing, on a mismatch."""
    params = trial_params(space, fixed_config(config_space), where=f"{config_space.source}: ", study=study.study_name)
    study.enqueue_trial(params)
    return params


def trial_params(space: SearchSpace, config: TrialConfig, *, where: str = "", study: str = "the study") -> dict[str, Any]:
    """The Optuna params that make `space` build exactly `config`, or a UserInputError naming the key."""
    if config.workload != space.spec.workload.name:
        _mismatch(where, "workload.name", config.workload, space.spec.workload.name, study)
    values = {name: _value_of(config, name) for name in space.params}
    for name, spec in space.params.items():
        _check_inside(spec, values[name], where + _config_path(name), study)
    for name, choices in space.systems.items():
        value = config.knobs.as_dict()[name]
        if value not in choices:
            raise UserInputError(f"{where}systems.{name}: the config has {value!r}, study {study!r} allows {choices}")
    _check_same(build_config(space, values, config.knobs), config, where, study)
    searched = {name: values[name] for name, spec in space.params.items() if not isinstance(spec, Fixed)}
    knobs = {name: config.knobs.as_dict()[name] for name, choices in space.systems.items() if len(choices) > 1}
    return {**searched, **knobs}


def _check_inside(spec: ParamSpec, value: Any, key: str, study: str) -> None:
    """`key` is the file and the key path in it."""
    if contains(spec, value):
        return
    if isinstance(spec, Fixed):
        _mismatch(key, "", value, spec.value, study)
    raise UserInputError(
        f"{key}: the config has {value!r}, outside study {study!r}'s {describe(spec)}; "
        f"edit the value, or enqueue into a study whose space holds it"
    )


def _config_path(name: str) -> str:
    """Where an export keeps a param: the trainer's under params, a workload option under workload."""
    return f"params.{name}" if name in TRAINING_KEYS else f"workload.{name}"


def _value_of(config: TrialConfig, name: str) -> Any:
    if name in TRAINING_KEYS:
        return getattr(config.training, name)
    return getattr(parse_options(config.workload, config.workload_options), name)


def _check_same(built: TrialConfig, config: TrialConfig, where: str, study: str) -> None:
    """What the study would build from these values must be the config itself."""
    ours = dataclasses.asdict(parse_options(config.workload, config.workload_options))
    theirs = dataclasses.asdict(parse_options(built.workload, built.workload_options))
    for key in ours:
        if ours[key] != theirs[key]:
            _mismatch(where, f"workload.{key}", ours[key], theirs[key], study)
    for key, value in dataclasses.asdict(config.training).items():
        if value != getattr(built.training, key):
            _mismatch(where, _TRAINING_PATHS.get(key, f"params.{key}"), value, getattr(built.training, key), study)


def _mismatch(where: str, path: str, ours: Any, theirs: Any, study: str) -> None:
    raise UserInputError(
        f"{where}{path}: the config has {ours!r} but study {study!r} fixes {theirs!r}; "
        f"enqueue a config of the same workload and fixed values, or edit the file"
    )
