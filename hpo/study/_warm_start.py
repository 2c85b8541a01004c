"""Warm-start a study from another: enqueue the K best configurations of study A that trained
normally into study B, which runs them before any sampled trial.

Each configuration is A's trial's params, mapped onto B's space: a param B does not search is dropped
(B's own value applies: a bigger model, another machine); a value outside B's range or choices skips
that configuration, with the reason, rather than clamping it to something A never ran.
"""

from __future__ import annotations

from dataclasses import dataclass

import optuna
from optuna.distributions import BaseDistribution, CategoricalDistribution, FloatDistribution, IntDistribution

from hpo.config.params import Choices, FloatRange, IntRange, ParamSpec
from hpo.config.space import SearchSpace
from hpo.records import RecordKey
from hpo.reporting import top_trials

__all__ = ["WarmStart", "searched_distributions", "warm_start"]


@dataclass(frozen=True)
class WarmStart:
    source_trial: int
    params: dict | None  # what was enqueued; None when skipped
    why_skipped: str = ""


def _distribution(spec: ParamSpec) -> BaseDistribution | None:
    if isinstance(spec, FloatRange):
        return FloatDistribution(spec.low, spec.high, log=spec.log, step=spec.step)
    if isinstance(spec, IntRange):
        return IntDistribution(spec.low, spec.high, log=spec.log, step=spec.step)
    if isinstance(spec, Choices):
        return CategoricalDistribution(list(spec.choices))
    return None  # fixed: not a param of the study's trials


def searched_distributions(space: SearchSpace) -> dict[str, BaseDistribution]:
    """The Optuna distribution of every param and knob the space searches."""
    dists = {name: d for name, spec in space.params.items() if (d := _distribution(spec)) is not None}
    dists.update({name: CategoricalDistribution(choices) for name, choices in space.systems.items() if len(choices) > 1})
    return dists


def _outside(dist: BaseDistribution, value) -> bool:
    if isinstance(dist, CategoricalDistribution):
        return value not in dist.choices
    return isinstance(value, bool) or not isinstance(value, int | float) or not dist.low <= value <= dist.high


def warm_start(source: optuna.Study, target: optuna.Study, target_space: SearchSpace, top: int) -> list[WarmStart]:
    """Enqueue A's `top` best trials into B; returns what happened to each."""
    dists, done = searched_distributions(target_space), []
    for trial in top_trials(source, top):
        params = {k: v for k, v in trial.params.items() if k in dists}
        outside = [f"{k}={v!r}" for k, v in params.items() if _outside(dists[k], v)]
        if outside:
            done.append(WarmStart(trial.number, None, f"outside {target.study_name!r}'s space: {', '.join(outside)}"))
            continue
        target.enqueue_trial(params, user_attrs={RecordKey.WARM_START_FROM: f"{source.study_name}#{trial.number}"})
        done.append(WarmStart(trial.number, params))
    return done
