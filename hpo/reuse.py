"""Reuse a study's results: the best trial(s), a trial's exported config, and retraining it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import optuna
import yaml

from hpo.config import TrialConfig
from hpo.errors import UserInputError
from hpo.execution.executor import TrialOutcome, execute
from hpo.storage.open import load_study_or_none, open_storage
from hpo.verify.cache import MemoryVerdicts


def open_study(name: str, storage_url: str) -> optuna.Study:
    study = load_study_or_none(open_storage(storage_url), name)
    if study is None:
        raise UserInputError(f"study {name!r} not found in the storage; list studies with `optuna studies --storage URL`")
    return study


def best_trials(study: optuna.Study) -> list[optuna.trial.FrozenTrial]:
    """The best feasible trial, or the feasible Pareto front for several objectives."""
    try:
        trials = study.best_trials if len(study.directions) > 1 else [study.best_trial]
    except ValueError:
        trials = []
    trials = [t for t in trials if t.user_attrs.get("verdict") == "ok"]
    if not trials:
        raise UserInputError(f"study {study.study_name!r} has no completed trial with verdict ok yet")
    return trials


def trial_summary(trial: optuna.trial.FrozenTrial) -> dict[str, Any]:
    return {"number": trial.number, "values": trial.values, "params": trial.params, "user_attrs": trial.user_attrs}


def find_trial(study: optuna.Study, number: int | None) -> optuna.trial.FrozenTrial:
    if number is None:
        return best_trials(study)[0]
    trials = study.get_trials(deepcopy=False)
    match = [t for t in trials if t.number == number]
    if not match:
        have = f"trials 0..{len(trials) - 1}" if trials else "no trials yet"
        raise UserInputError(f"--trial {number}: no such trial; study {study.study_name!r} has {have}")
    if "config" not in match[0].user_attrs:
        raise UserInputError(f"--trial {number}: the trial has no recorded config (state {match[0].state.name})")
    return match[0]


def export_config(trial: optuna.trial.FrozenTrial, path: Path) -> None:
    config = dict(trial.user_attrs["config"])
    text = f"# hpo config exported from trial {trial.number} (verdict: {trial.user_attrs.get('verdict')})\n"
    text += yaml.safe_dump(config, sort_keys=False)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text)
    tmp.replace(path)  # a reader never sees half a file


def load_trial_config(path: Path) -> TrialConfig:
    try:
        data = yaml.safe_load(path.read_text())
    except FileNotFoundError:
        raise UserInputError(f"{path}: no such file") from None
    except yaml.YAMLError as exc:
        raise UserInputError(f"{path}: malformed YAML: {getattr(exc, 'problem', exc)}") from None
    if not isinstance(data, dict):
        raise UserInputError(f"{path}: not an hpo config (expected a mapping)")
    return TrialConfig.from_dict(data, source=str(path))


def retrain(config: TrialConfig) -> TrialOutcome:
    """Train a config without Optuna, with the same knob verification as a study's trial."""
    return execute(config, MemoryVerdicts())
