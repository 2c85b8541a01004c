"""Retry a trial whose process died, with the same parameters, and give its ticket back so the
retry does not eat into the study's budget.

Optuna calls `RetryWithRefund` for a trial it failed for want of heartbeats (its process was killed,
hung or lost the database); a worker calls `fail_crashed_trial` when its trial process died under it
or ran past `study.trial_timeout_s`. Either way the trial ends FAIL with a `crashed: ...` or
`timeout: ...` verdict and, up to the study's `max_retries`,
a WAITING copy of its parameters is queued, which the next ticket's trial picks up (Optuna's ask
takes waiting trials first). The retry keeps Optuna's `failed_trial` and `retry_history` system
attrs, so `RetryHeartbeatStaleTrialCallback.retry_history(trial)` reads it.
"""

from __future__ import annotations

import copy

import optuna
from optuna.exceptions import UpdateFinishedTrialError
from optuna.trial import FrozenTrial, TrialState

from hpo.logging import get_logger
from hpo.records import RecordKey
from hpo.storage._optuna_compat import engine_of, storage_of
from hpo.storage._tickets import TicketBudget
from hpo.verdicts import Kind, Verdict

_log = get_logger(__name__)

# Study user attr holding the space file's `study.max_retries`, read when a trial crashes.
MAX_RETRIES_ATTR = "hpo:max_retries"
DEFAULT_MAX_RETRIES = 2
# A running trial's verdict until it finishes: what a trial still says if its process vanished.
UNFINISHED = str(
    Verdict(Kind.CRASHED, "the trial's process stopped before the trial finished (no heartbeat within the grace period)")
)


class RetryWithRefund:
    """Optuna's heartbeat-stale callback: queue a retry and refund its ticket, at most
    `max_retries` times per original trial (None: the study's own `hpo:max_retries`), and not
    after an error that repeats the attempt before it (`not_retried`). Returns why it queued no
    retry, or None when it queued one."""

    def __init__(self, max_retries: int | None = None):
        self.max_retries = max_retries

    def __call__(self, study: optuna.Study, trial: FrozenTrial) -> str | None:
        history = [*trial.system_attrs.get("retry_history", []), trial.number]
        limit = self.max_retries if self.max_retries is not None else max_retries_of(study)
        cause = trial.user_attrs.get(RecordKey.VERDICT, UNFINISHED)
        why_not = not_retried(trial, history, limit)
        if why_not is not None:
            _log.warning(f"trial {trial.number} {cause}; not retried: {why_not}")
            return why_not
        # Queue the retry before the refund: a ticket must never be claimable while its retry is
        # missing, or the ticket's trial samples fresh parameters and the retry is left stranded.
        study.add_trial(_retry_of(trial, history, cause))
        TicketBudget(engine_of(storage_of(study)), study.study_name).refund()
        _log.warning(f"trial {trial.number} {cause}; retrying with the same parameters (retry {len(history)} of {limit})")
        return None


def _retry_of(trial: FrozenTrial, history: list[int], cause: str) -> FrozenTrial:
    """The failed trial's retry, waiting: its parameters, the first attempt it retries and the
    attempts so far, the failure's verdict and error signature."""
    signature = trial.user_attrs.get(RecordKey.ERROR_SIGNATURE)
    return optuna.trial.create_trial(
        state=TrialState.WAITING,
        params=trial.params,
        distributions=trial.distributions,
        user_attrs={RecordKey.RETRY_OF: history[0], RecordKey.PREVIOUS_VERDICT: cause}
        | ({} if signature is None else {RecordKey.PREVIOUS_ERROR_SIGNATURE: signature}),
        system_attrs={"failed_trial": history[0], "retry_history": history},
    )


def not_retried(trial: FrozenTrial, history: list[int], limit: int) -> str | None:
    """Why the failed `trial` (attempt `history[-1]` of `history`) gets no retry: its retries are
    spent, or it failed with the same error as the attempt before it, which a deterministic bug
    would repeat on every retry (a transient error does not: its first retry is always queued)."""
    if len(history) > limit:
        return f"it ran {len(history)} times (study.max_retries {limit})"
    signature = trial.user_attrs.get(RecordKey.ERROR_SIGNATURE)
    if signature is not None and signature == trial.user_attrs.get(RecordKey.PREVIOUS_ERROR_SIGNATURE):
        return f"same error as trial {history[-2]}"
    return None


def max_retries_of(study: optuna.Study) -> int:
    return int(study.user_attrs.get(MAX_RETRIES_ATTR, DEFAULT_MAX_RETRIES))


def fail_crashed_trial(study: optuna.Study, trial_id: int, verdict: str) -> bool:
    """Mark a trial whose process died (or was ended) FAIL with `verdict` and queue its retry. False when the
    trial had already finished (it died after its last write) or another worker failed it first."""
    storage = storage_of(study)
    try:
        # The verdict goes first: Optuna refuses any write to a finished trial.
        storage.set_trial_user_attr(trial_id, RecordKey.VERDICT, verdict)
        if not storage.set_trial_state_values(trial_id, TrialState.FAIL):
            return False
    except UpdateFinishedTrialError:
        return False
    callback = storage.get_heartbeat_stale_trial_callback()
    if callback is not None:
        callback(study, copy.deepcopy(storage.get_trial(trial_id)))
    return True
