"""The only module that calls `trial.suggest_*`: it turns an Optuna trial into a frozen TrialConfig."""

from __future__ import annotations

import optuna

from hpo.config.params import AutoBatch, Choices, Fixed, FloatRange, IntRange, ParamSpec
from hpo.config.resolve import build_config
from hpo.config.space import SearchSpace
from hpo.config.trial import Knobs, LoaderSettings, ParallelSettings, TrialConfig
from hpo.records import RecordKey
from hpo.reporting import KEPT_ATTR

# Set on each trial of a `probe_first` study: its knobs came from the sweep, at this rank within
# their precision (hpo.strategy's ranking).


def suggest_config(trial: optuna.Trial, space: SearchSpace) -> TrialConfig:
    values = {name: _suggest(trial, name, spec) for name, spec in space.params.items()}
    loader = LoaderSettings(**{name: _suggest_knob(trial, name, choices) for name, choices in space.loader.items()})
    parallel = _suggest_parallel(trial, space)
    if space.study.strategy == "probe_first":
        return build_config(space, values, _kept_knobs(trial), loader, parallel)
    knobs = Knobs(**{name: _suggest_knob(trial, name, choices) for name, choices in space.systems.items()})
    return build_config(space, values, knobs, loader, parallel)


def _suggest_parallel(trial: optuna.Trial, space: SearchSpace) -> ParallelSettings | None:
    if not space.parallel:
        return None
    return ParallelSettings(**{k: _suggest_knob(trial, f"parallel.{k}", v) for k, v in space.parallel.items()})


def _kept_knobs(trial: optuna.Trial) -> Knobs:
    decided = trial.study.user_attrs.get(KEPT_ATTR)
    if not decided or not decided.get("kept"):
        raise RuntimeError("study.strategy probe_first: the study has no sweep result; its workers run the sweep first")
    kept = suggest_kept(trial, decided["kept"])
    trial.set_user_attr(RecordKey.KNOBS_CHOSEN_BY, "sweep")
    trial.set_user_attr(RecordKey.KNOBS_SWEEP_RANK, kept["rank"])
    return Knobs(**kept["knobs"])


def _suggest(trial: optuna.Trial, name: str, spec: ParamSpec):
    if isinstance(spec, Fixed):
        return spec.value
    if isinstance(spec, AutoBatch):  # not the sampler's: the trial picks it and records it
        return spec
    if isinstance(spec, Choices):
        return trial.suggest_categorical(name, list(spec.choices))
    if isinstance(spec, IntRange):
        return trial.suggest_int(name, spec.low, spec.high, step=spec.step, log=spec.log)
    assert isinstance(spec, FloatRange)
    return trial.suggest_float(name, spec.low, spec.high, step=spec.step, log=spec.log)


def _suggest_knob(trial: optuna.Trial, name: str, choices: list):
    # A fixed knob is not a trial param, so it does not add a useless dimension for the sampler.
    if len(choices) == 1:
        return choices[0]
    return trial.suggest_categorical(name, choices)


def suggest_kept(trial, kept: list[dict]) -> dict:
    """The kept combination this trial trains with: the precision among those kept, then, when
    several are kept for it, which one (a param per precision: its choices never change)."""
    precisions = sorted({k["knobs"]["precision"] for k in kept})
    precision = precisions[0] if len(precisions) == 1 else trial.suggest_categorical("precision", precisions)
    mine = [k for k in kept if k["knobs"]["precision"] == precision]
    if len(mine) == 1:
        return mine[0]
    rank = trial.suggest_categorical(f"kept_rank_{precision}", [k["rank"] for k in mine])
    return next(k for k in mine if k["rank"] == rank)
