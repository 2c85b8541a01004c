"""What a worker's two ways of running one trial share: in its own process (`InProcessTrials`,
`hpo.runtime._in_process_trials`), or in a fresh child of a forkserver (`ChildTrials`, the default,
`hpo.runtime._child_trials`). Each is called once per trial with the ticket's serial and the
worker's `ClaimKeeper`; a runner that cannot start trials raises `TrialsCannotStart`.
"""

from __future__ import annotations

import os
import socket

import optuna

from hpo.runtime._interrupts import Stopped
from hpo.storage import fail_crashed_trial
from hpo.verdicts import Kind, Verdict

__all__ = ["TrialsCannotStart", "fail_stopped", "worker_name"]


class TrialsCannotStart(RuntimeError):
    """Trial processes keep dying before their trial starts: this worker cannot run trials."""


def worker_name() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


def fail_stopped(study: optuna.Study, trial_id: int | None, stop: SystemExit) -> None:
    """The worker is stopping under its running trial (a stop signal, or the workload called
    sys.exit()): fail it and queue its retry now, rather than when it goes stale."""
    if trial_id is None:
        return
    verdict = stop.verdict if isinstance(stop, Stopped) else Verdict(Kind.CRASHED, f"its worker exited (SystemExit {stop.code})")
    fail_crashed_trial(study, trial_id, str(verdict))
