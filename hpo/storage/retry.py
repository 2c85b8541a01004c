"""Retry a trial whose worker died, with the same parameters, and give its ticket back so the
retry does not eat into the study's budget."""

from __future__ import annotations

import optuna
from optuna.storages import RetryFailedTrialCallback
from optuna.trial import FrozenTrial

from hpo.storage.tickets import TicketBudget


def engine_of(storage):
    """The SQLAlchemy engine behind an Optuna RDB storage (Optuna wraps it in a cache layer)."""
    return getattr(storage, "_backend", storage).engine


class RetryWithRefund(RetryFailedTrialCallback):
    def __call__(self, study: optuna.Study, trial: FrozenTrial) -> None:
        retries = len(trial.system_attrs.get("retry_history", [])) + 1
        if self._max_retry is not None and retries > self._max_retry:
            study._storage.set_trial_user_attr(trial._trial_id, "verdict", f"crashed: gave up after {retries - 1} retries")
            return
        TicketBudget(engine_of(study._storage), study.study_name).refund()
        super().__call__(study, trial)
