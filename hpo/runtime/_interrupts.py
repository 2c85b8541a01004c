"""Raise from a signal handler only where the exception cannot break the storage.

A signal handler's exception appears at whatever line the main thread had reached. Inside a storage
call (SQLAlchemy's pool returning a connection, a commit, Optuna's session scope) it can leave a
connection checked out with its transaction open: on SQLite that connection keeps the file's write
lock, so the worker's own clean-up (failing its trial for a retry) then fails with "database is
locked", and a worker stopped by SIGTERM exited 3 (storage failed) instead of 143 (seen in CI).

So a handler that raises first asks `in_storage_code(frame)`; when it is, it has the signal
delivered again after `RETRY_AFTER_S` (`send_again`, or an interval timer it can cancel) and
returns, until the main thread is out of the storage call.

A worker stops on SIGTERM (Slurm, Kubernetes) and on SIGINT (Ctrl-C, sent to the terminal's whole
foreground process group) the same way (`stop_on_signals`): `Stopped` is raised, its runner kills
its trial process, fails the trial (`terminated` / `interrupted`) and queues its retry, and every
`finally` on the way out removes what the worker made (its reference folder).
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
from collections.abc import Iterator
from types import FrameType

from hpo.logging import get_logger
from hpo.verdicts import Kind, Verdict

__all__ = ["RETRY_AFTER_S", "Stopped", "in_storage_code", "send_again", "stop_on_signals"]

_log = get_logger(__name__)

# Modules whose frames may hold a connection checked out or a transaction open.
STORAGE_MODULES = ("sqlalchemy", "optuna.storages", "psycopg", "pymysql", "sqlite3", "hpo.storage")
RETRY_AFTER_S = 0.05


def in_storage_code(frame: FrameType | None) -> bool:
    while frame is not None:
        if frame.f_globals.get("__name__", "").startswith(STORAGE_MODULES):
            return True
        frame = frame.f_back
    return False


def send_again(signum: int) -> threading.Timer:
    """Deliver `signum` to this process after RETRY_AFTER_S; cancel the returned timer once the
    handler is no longer installed."""
    timer = threading.Timer(RETRY_AFTER_S, os.kill, (os.getpid(), signum))
    timer.daemon = True
    timer.start()
    return timer


class Stopped(SystemExit):
    """A stop signal reached the worker: exits 128 + the signal, what a shell reports for it (130
    for Ctrl-C, 143 for SIGTERM). `verdict` is what its running trial records."""

    def __init__(self, signum: int):
        super().__init__(128 + signum)
        self.signum = signum

    @property
    def verdict(self) -> Verdict:
        if self.signum == signal.SIGINT:
            return Verdict(Kind.INTERRUPTED, "its worker was interrupted (SIGINT, Ctrl-C)")
        return Verdict(Kind.TERMINATED, f"its worker was stopped by {signal.Signals(self.signum).name}")


@contextlib.contextmanager
def stop_on_signals() -> Iterator[None]:
    """While inside, SIGTERM and SIGINT raise `Stopped` in the main thread once it is out of storage
    code, so every `finally` on the way out runs; another stop signal during that clean-up is
    ignored. A SIGINT this process inherited ignored (a background job of a shell without job
    control, `nohup`) stays ignored, as Python leaves it. Outside the main thread (a library
    caller's thread) nothing is installed."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    signals = [signal.SIGTERM] + ([signal.SIGINT] if signal.getsignal(signal.SIGINT) is not signal.SIG_IGN else [])
    stop = _StopHandler(signals)
    previous = {each: signal.signal(each, stop) for each in signals}
    try:
        yield
    finally:
        stop.cancel_resends()
        for each, handler in previous.items():
            signal.signal(each, handler)


class _StopHandler:
    """The handler `stop_on_signals` installs for `signals`: raises `Stopped` once the main thread
    is out of storage code (until then the signal is sent again), after ignoring every one of them."""

    def __init__(self, signals: list[int]) -> None:
        self.signals = signals
        self.resends: list[threading.Timer] = []

    def __call__(self, signum: int, frame: FrameType | None) -> None:
        if not self.resends:
            name = signal.Signals(signum).name
            _log.warning(f"hpo worker: {name}: stopping; its running trial is failed and queued for a retry")
        if in_storage_code(frame):  # raising here could leave a transaction open: again once out of it
            self.resends.append(send_again(signum))
            return
        for each in self.signals:
            signal.signal(each, signal.SIG_IGN)
        raise Stopped(signum)

    def cancel_resends(self) -> None:
        for timer in self.resends:
            timer.cancel()
