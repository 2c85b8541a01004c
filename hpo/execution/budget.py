"""The study's trial budget as the workers see it."""

from __future__ import annotations

import optuna
from optuna.trial import TrialState

from hpo.storage.retry import engine_of
from hpo.storage.tickets import TicketBudget


def tickets_of(study: optuna.Study) -> TicketBudget:
    return TicketBudget(engine_of(study._storage), study.study_name)


def has_running(study: optuna.Study) -> bool:
    return bool(study.get_trials(deepcopy=False, states=[TrialState.RUNNING]))
