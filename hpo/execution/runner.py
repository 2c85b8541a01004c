"""Run a study's trials in this process until its budget (or a timeout) is spent."""

from __future__ import annotations

import time

import optuna

from hpo.execution.budget import budget_of, has_waiting, trials_spent
from hpo.execution.objective import Objective
from hpo.progress import TrialPrinter
from hpo.space.loader import SearchSpace


def run_trials(study: optuna.Study, space: SearchSpace, timeout: float | None = None) -> int:
    """Run trials until the study's budget is spent; returns how many this process ran."""
    objective = Objective(space)
    budget = budget_of(study)
    printer = TrialPrinter(budget)
    deadline = None if timeout is None else time.monotonic() + timeout
    ran = 0
    while trials_spent(study) < budget or has_waiting(study):
        if deadline is not None and time.monotonic() >= deadline:
            break
        study.optimize(objective, n_trials=1, callbacks=[printer], gc_after_trial=True, catch=(Exception,))
        ran += 1
    return ran
