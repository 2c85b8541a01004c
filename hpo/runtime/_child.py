"""One trial in a fresh child process.

The child opens its own storage connection, runs the one Optuna trial its worker created and
sampled (with heartbeats), reports back only through the storage, and tells its parent as soon as it
has taken the trial, so that its heartbeats take over and a crash is pinned on it. What a trial does
around its objective wherever it runs is `hpo.runtime._guard`'s.
"""

from __future__ import annotations

import ctypes
import gc
import multiprocessing.connection
import os
import signal
import threading

from hpo.reporting import TrialPrinter, set_sink
from hpo.runtime._guard import GuardedObjective
from hpo.runtime._handed import open_handed
from hpo.runtime._quiet import quiet_optuna
from hpo.runtime._ticket_claims import StartHeartbeat
from hpo.storage import open_storage

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
    """Run the trial `trial_id`, which the worker created and sampled (`hpo.runtime._handed`): this
    process reads no other trial of the study."""
    _become_trial_process(conn)

    def started(trial_id: int) -> None:
        heartbeat.start(trial_id)
        conn.send(trial_id)  # the worker stops its heartbeats and pins this process's death on the trial

    study, space = open_handed(open_storage(storage_url, check_schema=False), study_name, trial_id, started)
    set_sink(conn.send)  # the worker's display shows this trial's progress
    heartbeat = StartHeartbeat(study)  # this process keeps its trial alive, not the worker
    objective = _guarded_objective(space, worker, launched_at, reference_dir, sampled_s)
    study.optimize(
        heartbeat.handing_over(objective),
        n_trials=1,
        callbacks=[TrialPrinter()],  # the worker writes the trial's dashboard note once this process ends
        gc_after_trial=False,
        catch=(Exception,),
    )
    # `conn` stays open: die_with_worker's thread is reading it, and the exit closes it.


def _become_trial_process(conn: multiprocessing.connection.Connection) -> None:
    """Settle this forked process as a trial process of its worker: its own process group, dying
    with the worker, leaving stops to the worker, Optuna's logging quiet."""
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


def _guarded_objective(space, worker: str, launched_at, reference_dir: str | None, sampled_s) -> GuardedObjective:
    from hpo.study import WorkerObjective  # torch and the trial stack: preloaded by the forkserver
    from hpo.verify.probing import ReferenceFiles

    # Another trial process of the worker reads what this one's probe keeps: the worker's folder.
    references = ReferenceFiles(reference_dir) if reference_dir is not None else None
    objective = WorkerObjective(space, launched_at=launched_at, references=references, sampled_s=sampled_s)
    return GuardedObjective(objective, worker=worker)
