"""One trial in a fresh child process. The child opens its own storage connection, runs one
Optuna trial (with heartbeats), reports back only through the storage, and tells its parent the
trial id first so that a crash can be pinned on the right trial."""

from __future__ import annotations

import ctypes
import multiprocessing.connection
import os
import signal

from hpo.execution.budget import tickets_of
from hpo.execution.objective import Objective
from hpo.execution.study import open_hpo_study
from hpo.progress import TrialPrinter
from hpo.storage.open import open_storage

PR_SET_PDEATHSIG = 1


def die_with_parent() -> None:
    """Linux: the kernel kills this process if its parent dies, so no orphan keeps training."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    except (OSError, AttributeError):
        pass  # not Linux: orphans finish their trial and report it, which is still correct


def run_one_trial(storage_url: str, study_name: str, conn: multiprocessing.connection.Connection) -> None:
    die_with_parent()
    os.environ.setdefault("KINETO_LOG_LEVEL", "5")
    study, space = open_hpo_study(open_storage(storage_url), study_name)
    objective = Objective(space, on_start=lambda trial: conn.send(trial._trial_id))
    study.optimize(objective, n_trials=1, callbacks=[TrialPrinter(tickets_of(study).state()[1])],
                   gc_after_trial=False, catch=(Exception,))
    conn.close()
