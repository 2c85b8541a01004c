"""The study's trial budget as the workers see it, and the recovery every worker runs between
trials so that no ticket outlives the process that held it."""

from __future__ import annotations

import warnings

import optuna
import sqlalchemy.exc
from optuna.storages import fail_stale_trials
from optuna.trial import TrialState

from hpo.errors import UserInputError
from hpo.storage.open import liveness
from hpo.storage.retry import engine_of
from hpo.storage.tickets import TicketBudget


def tickets_of(study: optuna.Study) -> TicketBudget:
    return TicketBudget(engine_of(study._storage), study.study_name)


def require_budget(study: optuna.Study) -> TicketBudget:
    tickets = tickets_of(study)
    try:
        budget = tickets.state()[1]
    except sqlalchemy.exc.SQLAlchemyError:  # no hpo_budget table at all: the same answer
        budget = 0
    if budget == 0:
        raise UserInputError(f"study {study.study_name!r} has no hpo trial budget (it was not created by `hpo run`); "
                             f"start it with `hpo run SPACE.yaml --study {study.study_name}`")
    return tickets


def has_running(study: optuna.Study) -> bool:
    return bool(study.get_trials(deepcopy=False, states=[TrialState.RUNNING]))


def recover(study: optuna.Study, tickets: TicketBudget) -> None:
    """Fail trials whose process stopped sending heartbeats (their retries get the tickets back)
    and release claims whose worker died before its trial started."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        fail_stale_trials(study)
    tickets.reap(liveness(study._storage)[1])
