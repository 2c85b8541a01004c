"""Which trials count, and in what order: the ones that trained to a finite value (a rejected
trial's value is the worst possible, a missed target is no success), Optuna's best or Pareto front
among them, and the top K."""

from __future__ import annotations

import math

import optuna
from optuna.trial import FrozenTrial, TrialState

from hpo.errors import UserInputError
from hpo.verdicts import Verdict

__all__ = ["best_trials", "top_trials", "trained_trials"]


def trained_trials(study: optuna.Study) -> list[FrozenTrial]:
    """COMPLETE trials with verdict ok and finite values."""
    return [
        t
        for t in study.get_trials(deepcopy=False, states=[TrialState.COMPLETE])
        if Verdict.parse(t.user_attrs.get("verdict")).ok and t.values and all(math.isfinite(v) for v in t.values)
    ]


def best_trials(study: optuna.Study) -> list[optuna.trial.FrozenTrial]:
    """Optuna's best trial, or its Pareto front for several objectives, among the trials that trained
    to a finite value (a missed target or a rejected trial is never a result)."""
    try:
        trials = study.best_trials if len(study.directions) > 1 else [study.best_trial]
    except ValueError:
        trials = []
    trained = {t.number for t in trained_trials(study)}
    trials = [t for t in trials if t.number in trained]
    if not trials:
        raise UserInputError(f"study {study.study_name!r} has no completed trial with verdict ok yet")
    return trials


def top_trials(study: optuna.Study, k: int) -> list[optuna.trial.FrozenTrial]:
    """The K best trials that trained: the Pareto front first (for one objective, by its value),
    then the rest by their first objective."""
    if k < 1:
        raise UserInputError(f"--top must be >= 1, got {k}")
    front = best_trials(study)
    numbers = {t.number for t in front}
    minimize = study.directions[0] == optuna.study.StudyDirection.MINIMIZE
    rest = sorted((t for t in trained_trials(study) if t.number not in numbers), key=lambda t: t.values[0], reverse=not minimize)
    return (front + rest)[:k]
