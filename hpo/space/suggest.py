"""The only module that calls `trial.suggest_*`: it turns an Optuna trial into a frozen TrialConfig."""

from __future__ import annotations

import optuna

from hpo.config import TRAINING_KEYS, Knobs, TrainingConfig, TrialConfig
from hpo.space.loader import SearchSpace
from hpo.space.params import Choices, Fixed, FloatRange, IntRange, ParamSpec


def suggest_config(trial: optuna.Trial, space: SearchSpace) -> TrialConfig:
    values = {name: _suggest(trial, name, spec) for name, spec in space.params.items()}
    knobs = Knobs(**{name: _suggest_knob(trial, name, choices) for name, choices in space.systems.items()})
    return build_config(space, values, knobs)


def build_config(space: SearchSpace, values: dict, knobs: Knobs) -> TrialConfig:
    spec = space.spec
    training_values = {k: v for k, v in values.items() if k in TRAINING_KEYS}
    workload_values = {k: v for k, v in values.items() if k not in TRAINING_KEYS}
    training = TrainingConfig(
        max_steps=spec.workload.max_steps,
        eval_every=spec.workload.eval_every,
        compile_backend=spec.systems.compile_backend,
        **training_values,
    )
    return TrialConfig(
        workload=spec.workload.name,
        workload_options={**space.workload_options(), **workload_values},
        training=training,
        knobs=knobs,
        seed=spec.study.seed,
        objectives=tuple(spec.study.objectives),
        directions=tuple(spec.study.directions),
        skip_slow=spec.study.skip_slow,
        slow_ratio=spec.study.slow_ratio,
    )


def _suggest(trial: optuna.Trial, name: str, spec: ParamSpec):
    if isinstance(spec, Fixed):
        return spec.value
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
