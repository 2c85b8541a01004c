"""One trial in a fresh child process, and what every trial does around the objective whether it
runs in a child or in its worker.

The child opens its own storage connection, runs the one Optuna trial its worker created and
sampled (with heartbeats), reports back only through the storage, and tells its parent as soon as it
has taken the trial, so that its heartbeats take over and a crash is pinned on it.
"""

from __future__ import annotations

import ctypes
import gc
import multiprocessing.connection
import os
import signal
import threading
import traceback
from collections.abc import Callable

import optuna
import sqlalchemy.exc

from hpo.config.space import SearchSpace
from hpo.errors import TrialError, error_signature, error_verdict, short_traceback
from hpo.logging import get_logger
from hpo.records import RecordKey
from hpo.reporting.progress import TrialPrinter, set_sink
from hpo.runtime.budget import StartHeartbeat
from hpo.runtime.quiet import quiet_optuna
from hpo.storage.open import open_storage
from hpo.storage.optuna_compat import rdb_backend, storage_of, trial_id_of
from hpo.storage.retry import UNFINISHED, RetryWithRefund
from hpo.storage.urls import mask_password
from hpo.study.create import build_sampler

_log = get_logger(__name__)

PR_SET_PDEATHSIG = 1


def die_with_parent(sig: int = signal.SIGKILL) -> None:
    """Linux: the kernel sends `sig` to this process when its parent dies, so no orphan keeps
    training. (A trial process's parent is the forkserver: see `die_with_worker`.)"""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, sig)
    except (OSError, AttributeError):
        pass  # not Linux: orphans finish their trial and report it, which is still correct


def die_with_worker(conn: multiprocessing.connection.Connection) -> None:
    """Kill this trial process as soon as its worker is gone. PR_SET_PDEATHSIG alone does not do
    it: the forkserver (the parent) outlives the worker, because every process it forks holds the
    worker's end of the pipe that tells the forkserver to exit."""

    def watch() -> None:
        try:
            conn.recv()  # the worker never sends: this returns when the worker's end closes
        except (EOFError, OSError):
            pass
        os.kill(os.getpid(), signal.SIGKILL)

    threading.Thread(target=watch, name="hpo-die-with-worker", daemon=True).start()


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
    error passes on retry) and the trial ends FAIL, which samplers ignore."""

    def __init__(self, objective: Callable[[optuna.Trial], float | list[float]], worker: str):
        self.objective, self.worker = objective, worker
        self.sticky: BaseException | None = None  # a device error that left this process's device unusable

    def __call__(self, trial: optuna.Trial):
        trial.set_user_attr(RecordKey.VERDICT, UNFINISHED)
        trial.set_user_attr(RecordKey.WORKER, self.worker)
        try:
            return self.objective(trial)
        except optuna.TrialPruned:
            raise
        except Exception as exc:
            verdict = exc.verdict if isinstance(exc, TrialError) else error_verdict(exc)
            from hpo.verify.known_failures import is_sticky_device_error  # imported only on an error

            if is_sticky_device_error(exc.__cause__ or exc):
                self.sticky = exc
            trial.set_user_attr(RecordKey.VERDICT, mask_password(str(verdict)))
            trial.set_user_attr(RecordKey.ERROR_TRACEBACK, mask_password(short_traceback(exc)))
            root = exc.__cause__ if isinstance(exc, TrialError) and exc.__cause__ is not None else exc
            trial.set_user_attr(RecordKey.ERROR_SIGNATURE, mask_password(error_signature(root)))
            _log.warning(
                f"trial {trial.number} failed with an error (not a knob verdict):\n{mask_password(''.join(traceback.format_exception(exc)))}"
            )
            _queue_retry(trial)
            raise


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


def run_one_trial(
    storage_url: str,
    study_name: str,
    trial_id: int,
    worker: str,
    conn: multiprocessing.connection.Connection,
    launched_at: float | None = None,
    reference_dir: str | None = None,
    sampled_s: float | None = None,
) -> None:
    """Run the trial `trial_id`, which the worker created and sampled (`hpo.runtime.handed`): this
    process reads no other trial of the study."""
    # Everything the forkserver imported moves to the GC's permanent generation: the trial's
    # gc.collect() then walks only the trial's own objects (250 ms less here) and leaves the pages
    # shared with the forkserver unwritten (docs.python.org/3/library/gc.html#gc.freeze).
    gc.freeze()
    # Its worker owns a stop: on Ctrl-C (or SIGTERM) the worker kills this process and fails its
    # trial for a retry. A KeyboardInterrupt here would race it and end the trial FAIL unretried.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    os.setpgrp()  # its own process group: its worker ends it with everything it starts (os.killpg)
    die_with_parent()
    die_with_worker(conn)
    quiet_optuna()
    from hpo.runtime.handed import open_handed  # it imports this module
    from hpo.study.objective import Objective  # torch and the trial stack: preloaded by the forkserver

    def started(trial_id: int) -> None:
        heartbeat.start(trial_id)
        conn.send(trial_id)  # the worker stops its heartbeats and pins this process's death on the trial

    study, space = open_handed(open_storage(storage_url, check_schema=False), study_name, trial_id, started)
    set_sink(conn.send)  # the worker's display shows this trial's progress
    heartbeat = StartHeartbeat(study)  # this process keeps its trial alive, not the worker
    objective = Objective(space, launched_at=launched_at, reference_dir=reference_dir, sampled_s=sampled_s)
    study.optimize(
        heartbeat.handing_over(GuardedObjective(objective, worker=worker)),
        n_trials=1,
        callbacks=[TrialPrinter()],  # the worker writes the trial's dashboard note once this process ends
        gc_after_trial=False,
        catch=(Exception,),
    )
    # `conn` stays open: die_with_worker's thread is reading it, and the exit closes it.
