"""`hpo best` and `hpo export`: a study's best trial(s) and a trial's exported config. Torch-free:
both commands start in well under a second."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import optuna
import yaml

from hpo.config import legacy
from hpo.config.objectives import metric_direction
from hpo.errors import UserInputError
from hpo.files import write_atomic
from hpo.records import RecordKey
from hpo.reporting import best_trials, top_trials
from hpo.storage import load_study_or_none, open_storage
from hpo.workloads.catalog import metrics_of


def open_study(name: str, storage_url: str) -> optuna.Study:
    study = load_study_or_none(open_storage(storage_url), name)
    if study is None:
        raise UserInputError(f"study {name!r} not found in the storage; list studies with `optuna studies --storage URL`")
    return study


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


def exported_config(trial: optuna.trial.FrozenTrial) -> dict[str, Any]:
    """The trial's recorded config as a search-space file with every value fixed (a trial of
    hpo 0.1 recorded format 1: it is written in today's format)."""
    config = dict(trial.user_attrs[RecordKey.CONFIG])
    if config.get("format") == legacy.FORMAT_1:
        try:
            config, _ = legacy.upgrade(config)
        except UserInputError as exc:
            raise UserInputError(f"trial {trial.number}: its recorded config cannot be read: {exc}") from None
    return _fixed_length(config, trial.user_attrs.get(RecordKey.STEPS_RUN))


def _fixed_length(config: dict[str, Any], steps_run: int | None) -> dict[str, Any]:
    """A trial that a time budget or a target ended is exported as the steps it ran, with no budget
    or target, so `hpo train` reproduces its metric exactly on any machine, however fast."""
    workload = dict(config["workload"])
    if steps_run is None or not {"budget_s", "target"} & set(workload):
        return config
    target = workload.pop("target", None) or {}
    workload.pop("budget_s", None)
    workload.pop("eval_every_s", None)
    workload["max_steps"] = steps_run
    study = dict(config["study"])
    pairs = [(o, d) for o, d in zip(study["objectives"], study["directions"], strict=True) if o != "time_to_target_s"]
    if not pairs:  # time to target was the only objective: report the target's metric instead
        metric = next(iter(target))
        pairs = [(metric, metric_direction(metric, metrics_of(workload["name"])))]
    study["objectives"], study["directions"] = [o for o, _ in pairs], [d for _, d in pairs]
    return {**config, "study": study, "workload": workload}


def export_config(trial: optuna.trial.FrozenTrial, path: Path) -> None:
    text = f"# hpo config exported from trial {trial.number} (verdict: {trial.user_attrs.get(RecordKey.VERDICT)})\n"
    text += yaml.safe_dump(exported_config(trial), sort_keys=False)
    write_atomic(path, text)  # a reader never sees half a file


def export_top(study: optuna.Study, k: int, folder: Path) -> list[tuple[optuna.trial.FrozenTrial, Path]]:
    """Write DIR/trial-<N>.yaml for the K best trials; each runs with `hpo train`."""
    if folder.exists() and not folder.is_dir():
        raise UserInputError(f"-o {folder}: with --top the output is a folder, and this is a file")
    trials = top_trials(study, k)
    folder.mkdir(parents=True, exist_ok=True)
    written = []
    for trial in trials:
        path = folder / f"trial-{trial.number}.yaml"
        export_config(trial, path)
        written.append((trial, path))
    return written
