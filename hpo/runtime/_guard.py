"""What every trial does around its objective, wherever it runs (its own trial process, the
worker's process with `--in-process`, or the worker's sampling of a trial it hands on): the guard
that records an escaping error on the trial and queues its retry, and the ticket's own seeded
sampler. Both `hpo.runtime._child` and `hpo.runtime._handed` use them, so they live below both."""

from __future__ import annotations

import traceback
from collections.abc import Callable

import optuna
import sqlalchemy.exc

from hpo.config.space import SearchSpace
from hpo.errors import TrialError, error_signature, error_verdict, short_traceback
from hpo.logging import get_logger
from hpo.masking import mask_secrets
from hpo.records import RecordKey
from hpo.storage import UNFINISHED, RetryWithRefund, rdb_backend, storage_of, trial_id_of
from hpo.study import build_sampler

__all__ = ["GuardedObjective", "sampler_for_ticket"]

_log = get_logger(__name__)


def sampler_for_ticket(space: SearchSpace, serial: int) -> optuna.samplers.BaseSampler:
    """The space's sampler, seeded per ticket. One seed for every trial process would draw the
    same "random" parameters in each of them; seed + serial stays reproducible for one worker."""
    spec = space.study.sampler
    return build_sampler(spec if spec.seed is None else spec.model_copy(update={"seed": spec.seed + serial}))


class GuardedObjective:
    """Names the worker and leaves a verdict that says what happened if the trial never reaches
    its own: `crashed: ...` if the process dies. An exception from the objective is an error, not
    a knob verdict: its full traceback goes to stderr and a truncated copy into `error_traceback`,
    a retry with the same parameters is queued (study.max_retries, as for a crash: a transient
    error passes on retry) and the trial ends FAIL, which samplers ignore. With `retry=False` (a
    study the user drives with `optimize`, which has no hpo ticket budget) no retry is queued."""

    def __init__(self, objective: Callable[[optuna.Trial], float | list[float]], worker: str, retry: bool = True):
        self.objective, self.worker, self.retry = objective, worker, retry
        self.sticky: BaseException | None = None  # a device error that left this process's device unusable

    def __call__(self, trial: optuna.Trial):
        trial.set_user_attr(RecordKey.VERDICT, UNFINISHED)
        trial.set_user_attr(RecordKey.WORKER, self.worker)
        try:
            return self.objective(trial)
        except optuna.TrialPruned:
            raise
        except Exception as exc:
            self._record_error(trial, exc)
            if self.retry:
                _queue_retry(trial)
            raise

    def _record_error(self, trial: optuna.Trial, exc: Exception) -> None:
        """The error's verdict, traceback and signature on the trial, its whole traceback in the log;
        a sticky device error kept (`sticky`): this process's device cannot run another trial."""
        verdict = exc.verdict if isinstance(exc, TrialError) else error_verdict(exc)
        from hpo.verify.fault import is_sticky_device_error  # imported only on an error

        if is_sticky_device_error(exc.__cause__ or exc):
            self.sticky = exc
        trial.set_user_attr(RecordKey.VERDICT, mask_secrets(str(verdict)))
        trial.set_user_attr(RecordKey.ERROR_TRACEBACK, mask_secrets(short_traceback(exc)))
        root = exc.__cause__ if isinstance(exc, TrialError) and exc.__cause__ is not None else exc
        trial.set_user_attr(RecordKey.ERROR_SIGNATURE, mask_secrets(error_signature(root)))
        _log.warning(
            f"trial {trial.number} failed with an error (not a knob verdict):\n{mask_secrets(''.join(traceback.format_exception(exc)))}"
        )


def _queue_retry(trial: optuna.Trial) -> None:
    """Queue the errored trial's retry in a study with an hpo budget (an RDB one). A storage error
    here must not hide the trial's own: it is said, and the trial still ends FAIL."""
    study = trial.study
    if not isinstance(rdb_backend(storage_of(study)), optuna.storages.RDBStorage):
        return
    try:
        why_not = RetryWithRefund()(study, storage_of(study).get_trial(trial_id_of(trial)))
        if why_not is not None:
            trial.set_user_attr(RecordKey.NOT_RETRIED, why_not)
    except (sqlalchemy.exc.SQLAlchemyError, optuna.exceptions.StorageInternalError) as exc:
        _log.warning(f"trial {trial.number}: its retry could not be queued ({type(exc).__name__}: {exc})")
