"""Which trials count, and in what order: the ones that trained to a finite value (a rejected
trial's value is the worst possible, a missed target is no success), the best or the Pareto front
among them, and the top K."""

from __future__ import annotations

import math

import optuna
from optuna.trial import FrozenTrial, TrialState

from hpo.errors import UserInputError
from hpo.records import RecordKey
from hpo.verdicts import Verdict

__all__ = ["best_trials", "top_trials", "trained_trials"]


def trained_trials(study: optuna.Study) -> list[FrozenTrial]:
    """COMPLETE trials with verdict ok and finite values."""
    return [
        t
        for t in study.get_trials(deepcopy=False, states=[TrialState.COMPLETE])
        if Verdict.parse(t.user_attrs.get(RecordKey.VERDICT)).ok and t.values and all(math.isfinite(v) for v in t.values)
    ]


def best_trials(study: optuna.Study) -> list[optuna.trial.FrozenTrial]:
    """The best trial that trained (ties: the first), or for several objectives the Pareto front of
    the trials that trained, by number. Chosen among them, not filtered from Optuna's best: a trial
    of hpo 0.1 rejected with a placeholder value (0.0) beat every trial that trained."""
    trained = trained_trials(study)
    if not trained:
        raise UserInputError(_none_trained(study))
    signed = {t.number: _signed(study, t) for t in trained}
    if len(study.directions) == 1:
        return [min(trained, key=lambda t: (signed[t.number], t.number))]
    front: list[FrozenTrial] = []
    # In this order a trial's dominators come before it, and one off the front is dominated by one on it.
    for trial in sorted(trained, key=lambda t: (signed[t.number], t.number)):
        if not any(_dominates(signed[f.number], signed[trial.number]) for f in front):
            front.append(trial)
    return sorted(front, key=lambda t: t.number)


def _none_trained(study: optuna.Study) -> str:
    """Why no trial counts: none trained normally, or those that did could not produce an objective."""
    ok = [
        t
        for t in study.get_trials(deepcopy=False, states=[TrialState.COMPLETE])
        if Verdict.parse(t.user_attrs.get(RecordKey.VERDICT)).ok
    ]
    if not ok:
        return f"study {study.study_name!r} has no completed trial with verdict ok yet"
    missed = sum(t.user_attrs.get(RecordKey.TARGET_REACHED) is False for t in ok)
    why = f"{missed} never reached workload.target (target_reached: false)" if missed else "none produced every objective"
    return f"study {study.study_name!r}: {len(ok)} trials trained, but {why}, so each has the worst value"


def _signed(study: optuna.Study, trial: FrozenTrial) -> tuple[float, ...]:
    """The trial's values, each negated where it is maximized: lower is better for all."""
    minimize = optuna.study.StudyDirection.MINIMIZE
    return tuple(v if d == minimize else -v for v, d in zip(trial.values, study.directions, strict=True))


def _dominates(a: tuple[float, ...], b: tuple[float, ...]) -> bool:
    return a != b and all(x <= y for x, y in zip(a, b, strict=True))


def top_trials(study: optuna.Study, k: int) -> list[optuna.trial.FrozenTrial]:
    """The K best trials that trained: the Pareto front first (for one objective, by its value),
    then the rest by their first objective."""
    if k < 1:
        raise UserInputError(f"--top must be >= 1, got {k}")
    front = best_trials(study)
    numbers = {t.number for t in front}
    rest = sorted((t for t in trained_trials(study) if t.number not in numbers), key=lambda t: _signed(study, t)[0])
    return (front + rest)[:k]
