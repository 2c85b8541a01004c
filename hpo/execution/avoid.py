"""A sampler wrapper that never proposes a knob combination already known to be incompatible.

Constraints teach TPE, NSGA-II and GP to prefer feasible regions, but they still revisit a known
incompatible combination now and then (categorical priors are smoothed). Re-proposing it buys
nothing: its verdict is cached. So the wrapper redraws any proposal whose model-shaping params
(everything but the trainer's lr, batch size, ...) match a trial rejected as `incompatible` or `slow`.
Divergence and OOM are not avoided this way: they depend on the learning rate and batch size too.
"""

from __future__ import annotations

import random
from typing import Any

import optuna
from optuna.distributions import BaseDistribution, CategoricalDistribution
from optuna.samplers import BaseSampler
from optuna.trial import FrozenTrial, TrialState

from hpo.config import TRAINING_KEYS

AVOIDED_VERDICTS = ("incompatible", "slow")
REDRAWS = 10


def _shape(params: dict[str, Any]) -> frozenset:
    return frozenset((k, v) for k, v in params.items() if k not in TRAINING_KEYS)


class AvoidKnownFailures(BaseSampler):
    def __init__(self, base: BaseSampler, seed: int | None = None):
        self.base, self._rng = base, random.Random(seed)

    def _known_bad(self, study: optuna.Study) -> list[frozenset]:
        return [
            _shape(t.params)
            for t in study.get_trials(deepcopy=False, states=[TrialState.COMPLETE])
            if str(t.user_attrs.get("verdict", "")).startswith(AVOIDED_VERDICTS)
        ]

    def infer_relative_search_space(self, study, trial) -> dict[str, BaseDistribution]:
        return self.base.infer_relative_search_space(study, trial)

    def sample_relative(self, study, trial, search_space) -> dict[str, Any]:
        bad = self._known_bad(study)
        params = self.base.sample_relative(study, trial, search_space)
        for _ in range(REDRAWS):
            if not any(combo <= _shape(params) for combo in bad):
                return params
            params = self.base.sample_relative(study, trial, search_space)
        # The base sampler keeps landing there: leave the categorical params of the matching
        # combination to `sample_independent`, which picks among the values not known to fail.
        clash = set().union(*(dict(c) for c in bad if c <= _shape(params)))
        return {k: v for k, v in params.items() if k not in clash or not isinstance(search_space[k], CategoricalDistribution)}

    def sample_independent(self, study, trial, param_name: str, param_distribution: BaseDistribution) -> Any:
        value = self.base.sample_independent(study, trial, param_name, param_distribution)
        if not isinstance(param_distribution, CategoricalDistribution):
            return value
        bad = self._known_bad(study)
        completes_bad = lambda v: any(combo <= _shape({**trial.params, param_name: v}) for combo in bad)  # noqa: E731
        if completes_bad(value):
            others = [c for c in param_distribution.choices if not completes_bad(c)]
            if others:
                value = self._rng.choice(others)
        return value

    def before_trial(self, study, trial) -> None:
        self.base.before_trial(study, trial)

    def after_trial(self, study, trial: FrozenTrial, state, values) -> None:
        self.base.after_trial(study, trial, state, values)

    def reseed_rng(self) -> None:
        self.base.reseed_rng()
