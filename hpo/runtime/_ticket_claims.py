"""The study's trial budget as the workers see it: the recovery every worker runs between trials,
and what keeps a claimed ticket alive until its trial ends, so that no ticket outlives the
process that held it and none is given back while that process lives."""

from __future__ import annotations

import threading
import warnings
from collections.abc import Callable
from typing import Any

import optuna
import sqlalchemy.exc
from optuna.storages import fail_stale_trials
from optuna.trial import TrialState

from hpo.errors import UserInputError
from hpo.logging import get_logger
from hpo.storage import TicketBudget, engine_of, liveness, storage_of, trial_id_of
from hpo.verdicts import Kind, Verdict

_log = get_logger(__name__)


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


class ClaimLost(Exception):
    """The claim's ticket went back to the budget before its trial could bind it (see `bind_ticket`)."""


LOST = str(
    Verdict(
        Kind.ERROR,
        "not run: its ticket went back to the budget before the trial started (its claim went "
        "untouched for the grace period, e.g. while the database was unreachable)",
    )
)


def bind_ticket(study: optuna.Study, tickets: TicketBudget, serial: int, trial_id: int) -> None:
    """The claim's trial exists: it carries the ticket from now on, protected by its heartbeats
    (the first one now, or the trial would never count as stale if this process died at once).

    If the claim was reaped meanwhile, its ticket already pays for another trial: this one ends
    FAIL before any work, a waiting trial it took (a retry, an enqueued config) is queued again for
    that other trial, and `ClaimLost` is raised, out of `study.optimize`."""
    storage = storage_of(study)
    if tickets.bind(serial):
        storage.record_heartbeat(trial_id)
        return
    trial = storage.get_trial(trial_id)
    if trial.params or trial.system_attrs:  # it came from the waiting queue: put it back
        study.add_trial(
            optuna.trial.create_trial(
                state=TrialState.WAITING,
                params=trial.params,
                distributions=trial.distributions,
                user_attrs=trial.user_attrs,
                system_attrs=trial.system_attrs,
            )
        )
    storage.set_trial_user_attr(trial_id, "verdict", LOST)
    storage.set_trial_state_values(trial_id, TrialState.FAIL)
    _log.warning(f"trial {trial.number} {LOST}")
    raise ClaimLost(f"ticket {serial} was reaped before trial {trial.number} could bind it")


class ClaimKeeper:
    """While its worker lives, a claimed ticket must not look abandoned: this thread touches the
    claim until the trial exists (`bound`). From then on the trial's own process keeps the trial
    alive with its heartbeats (`StartHeartbeat`, then Optuna's), never the worker: a trial whose
    process stops reporting goes stale and is retried even though its worker lives."""

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
        self._stop.set()

    def _keep(self) -> None:
        interval = liveness(storage_of(self.study))[0]
        while not self._stop.wait(interval):
            try:
                self.tickets.touch(self.serial)
            except (sqlalchemy.exc.SQLAlchemyError, optuna.exceptions.StorageInternalError):
                continue  # the database is briefly unreachable: try again next interval


class StartHeartbeat:
    """The trial process's heartbeats for its trial from its start until its objective runs.
    Optuna's own heartbeat thread starts only after the trial's parameters are sampled, which can
    outlast the grace period on a busy machine (64 workers on 2 cores: TPE took over 30 s); it
    takes over when the objective starts (`handing_over`). Optuna's heartbeats exist only inside
    `Study.optimize` ("Heartbeat of storage is supposed to be used with Study.optimize"), which
    every hpo trial runs in."""

    def __init__(self, study: optuna.Study):
        self.study = study
        self._stop = threading.Event()

    def start(self, trial_id: int) -> None:
        threading.Thread(target=self._beat, args=(trial_id,), name="hpo-start-heartbeat", daemon=True).start()

    def handing_over(self, objective: Callable[[optuna.Trial], Any]) -> Callable[[optuna.Trial], Any]:
        def run(trial: optuna.Trial):
            self.stop()  # inside Study.optimize's heartbeat thread from here on
            return objective(trial)

        return run

    def stop(self) -> None:
        """Also when the trial never reached its objective (its sampling raised): a worker running
        trials in-process must not keep that trial alive."""
        self._stop.set()

    def _beat(self, trial_id: int) -> None:
        storage = storage_of(self.study)
        while not self._stop.wait(liveness(storage)[0]):
            try:
                storage.record_heartbeat(trial_id)
            except (sqlalchemy.exc.SQLAlchemyError, optuna.exceptions.StorageInternalError):
                continue


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
