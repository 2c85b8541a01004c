"""The study's trial budget as the workers see it: the recovery every worker runs between trials,
and what keeps a claimed ticket alive until its trial ends, so that no ticket outlives the
process that held it and none is given back while that process lives."""

from __future__ import annotations

import threading
import warnings
from collections.abc import Callable

import optuna
import sqlalchemy.exc
from optuna.storages import fail_stale_trials
from optuna.trial import TrialState

from hpo.errors import UserInputError
from hpo.storage.optuna_compat import engine_of, liveness, storage_of, trial_id_of
from hpo.storage.tickets import TicketBudget


def tickets_of(study: optuna.Study) -> TicketBudget:
    return TicketBudget(engine_of(storage_of(study)), study.study_name)


def require_budget(study: optuna.Study) -> TicketBudget:
    tickets = tickets_of(study)
    try:
        budget = tickets.state()[1]
    except sqlalchemy.exc.SQLAlchemyError:  # no hpo_budget table at all: the same answer
        budget = 0
    if budget == 0:
        raise UserInputError(
            f"study {study.study_name!r} has no hpo trial budget (it was not created by `hpo run`); "
            f"start it with `hpo run SPACE.yaml --study {study.study_name}`"
        )
    return tickets


def has_running(study: optuna.Study) -> bool:
    return bool(study.get_trials(deepcopy=False, states=[TrialState.RUNNING]))


def recover(study: optuna.Study, tickets: TicketBudget) -> None:
    """Fail trials whose process stopped sending heartbeats (their retries get the tickets back)
    and release claims whose worker died before its trial started."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        fail_stale_trials(study)
    tickets.reap(liveness(storage_of(study))[1])


def bind_ticket(study: optuna.Study, tickets: TicketBudget, serial: int, trial_id: int) -> None:
    """The claim's trial exists: it carries the ticket from now on, protected by its heartbeats
    (the first one now, or the trial would never count as stale if this process died at once)."""
    tickets.bind(serial)
    storage_of(study).record_heartbeat(trial_id)


class ClaimKeeper:
    """While its worker lives, a claimed ticket must not look abandoned: this thread touches the
    claim until the trial exists, then records the trial's heartbeats. Optuna's own heartbeats
    start only after the trial's parameters are sampled, which can outlast the grace period on a
    busy machine (64 workers on 2 cores: TPE took over 30 s)."""

    def __init__(self, study: optuna.Study, tickets: TicketBudget, serial: int):
        self.study, self.tickets, self.serial = study, tickets, serial
        self.trial_id: int | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._keep, name=f"hpo-claim-{serial}", daemon=True)

    def __enter__(self) -> ClaimKeeper:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()

    def bound(self, trial_id: int) -> None:
        self.trial_id = trial_id

    def _keep(self) -> None:
        interval = liveness(storage_of(self.study))[0]
        while not self._stop.wait(interval):
            try:
                if self.trial_id is None:
                    self.tickets.touch(self.serial)
                else:
                    storage_of(self.study).record_heartbeat(self.trial_id)
            except (sqlalchemy.exc.SQLAlchemyError, optuna.exceptions.StorageInternalError):
                continue  # the database is briefly unreachable: try again next interval


class BindOnStart(optuna.samplers.BaseSampler):
    """The study's sampler, calling `on_start(trial_id)` as soon as a trial exists: Optuna calls
    `before_trial` right after creating the trial (or taking a waiting retry), before the relative
    sampling, so the ticket is bound before any slow work."""

    def __init__(self, base: optuna.samplers.BaseSampler, on_start: Callable[[int], None]):
        self.base, self.on_start = base, on_start

    def before_trial(self, study, trial) -> None:
        self.on_start(trial_id_of(trial))
        self.base.before_trial(study, trial)

    def infer_relative_search_space(self, study, trial):
        return self.base.infer_relative_search_space(study, trial)

    def sample_relative(self, study, trial, search_space):
        return self.base.sample_relative(study, trial, search_space)

    def sample_independent(self, study, trial, param_name, param_distribution):
        return self.base.sample_independent(study, trial, param_name, param_distribution)

    def after_trial(self, study, trial, state, values) -> None:
        self.base.after_trial(study, trial, state, values)

    def reseed_rng(self) -> None:
        self.base.reseed_rng()
