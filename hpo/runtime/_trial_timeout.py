"""`study.trial_timeout_s`: how long a trial may run, from its start to its end, before it is ended
and recorded as `timeout: ...` (FAIL, retried under `study.max_retries` like a crashed trial).

In a trial process (the default) its worker kills the process and everything it started, whatever
the trial is doing (`hpo.runtime._child_trials.ChildTrials`). In-process (`--in-process`) there is no
process to kill: `InProcessDeadline` raises `TrialTimeout` in the main thread from SIGALRM, once
it is out of any storage call (`hpo.runtime._interrupts`). That stops a Python-level hang (a loop, a
sleep, a blocked read that Python retries), but not a hang inside C code that never returns to the
interpreter (a deadlocked CUDA kernel or collective): only a trial process can be ended then.
"""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Callable
from typing import Any

from hpo.runtime._interrupts import RETRY_AFTER_S, in_storage_code
from hpo.verdicts import Kind, Verdict

__all__ = ["InProcessDeadline", "TrialTimeout", "timeout_verdict"]


def timeout_verdict(limit_s: float, elapsed_s: float) -> Verdict:
    return Verdict(Kind.TIMEOUT, f"trial exceeded study.trial_timeout_s={limit_s:g} after {elapsed_s:.1f} s")


class TrialTimeout(BaseException):
    """Raised in the main thread when an in-process trial outlives its limit. A BaseException,
    like KeyboardInterrupt, so that neither an objective's `except Exception` nor Optuna's `catch`
    records it: it leaves `Study.optimize` with the trial still RUNNING, and the worker records it
    as it records a killed trial process."""


class InProcessDeadline:
    """Context around `Study.optimize` in the worker's main thread: `start()` (when the trial
    exists) arms SIGALRM for `limit_s`; `until_return(objective)` disarms it when the objective
    returns, before Optuna records the result. No limit: does nothing."""

    def __init__(self, limit_s: float | None):
        self.limit_s, self.started = limit_s, None

    def __enter__(self) -> InProcessDeadline:
        if self.limit_s is not None:
            if threading.current_thread() is not threading.main_thread():
                raise RuntimeError("study.trial_timeout_s in-process needs the main thread (SIGALRM); run trials in processes")
            self._previous = signal.signal(signal.SIGALRM, self._ring)
        return self

    def __exit__(self, *exc) -> None:
        if self.limit_s is not None:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, self._previous)

    def start(self) -> None:
        self.started = time.monotonic()
        if self.limit_s is not None:
            signal.setitimer(signal.ITIMER_REAL, self.limit_s)

    def until_return(self, objective: Callable[[Any], Any]) -> Callable[[Any], Any]:
        def run(trial):
            try:
                return objective(trial)
            finally:
                if self.limit_s is not None:
                    signal.setitimer(signal.ITIMER_REAL, 0)

        return run

    def verdict(self) -> Verdict:
        return timeout_verdict(self.limit_s, time.monotonic() - self.started)

    def _ring(self, signum, frame) -> None:
        if in_storage_code(frame):  # raising there could leave a transaction open: ring again once out
            signal.setitimer(signal.ITIMER_REAL, RETRY_AFTER_S)  # disarming cancels it, as it does the limit
            return
        raise TrialTimeout(str(self.verdict()))
