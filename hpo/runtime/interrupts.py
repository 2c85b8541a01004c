"""Raise from a signal handler only where the exception cannot break the storage.

A signal handler's exception appears at whatever line the main thread had reached. Inside a storage
call (SQLAlchemy's pool returning a connection, a commit, Optuna's session scope) it can leave a
connection checked out with its transaction open: on SQLite that connection keeps the file's write
lock, so the worker's own clean-up (failing its trial for a retry) then fails with "database is
locked", and a worker stopped by SIGTERM exited 3 (storage failed) instead of 143 (seen in CI).

So a handler that raises first asks `in_storage_code(frame)`; when it is, it has the signal
delivered again after `RETRY_AFTER_S` (`send_again`, or an interval timer it can cancel) and
returns, until the main thread is out of the storage call.
"""

from __future__ import annotations

import os
import threading
from types import FrameType

__all__ = ["RETRY_AFTER_S", "in_storage_code", "send_again"]

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
