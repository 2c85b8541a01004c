"""Connection pooling for many workers on one server: each process holds a database connection
only while it runs a statement, and at most one at a time.

A worker, its trial process and `hpo run` each used to keep a pooled connection open (idle most of
the time): 14 connections for 6 workers, so PostgreSQL's default of 100 served about 42 workers.
`OneAtATimePool` opens a connection for each checkout and closes it on return (as SQLAlchemy's
`NullPool` does), and lets one thread of the process hold them at a time; the others wait for it
(a trial's heartbeat thread waits for its objective's write, a few milliseconds). A worker and its
trial processes also take turns, through a lock file (`LOCK_ENV`). An idle worker holds none. The
cost is a connect per transaction: connect + `SELECT 1` took 10.8 ms (median of 30) to PostgreSQL
on this loaded 2-core host, 9.1 ms through PgBouncer (docs/scaling.md).
"""

from __future__ import annotations

import fcntl
import os
import tempfile
import threading
import time

import sqlalchemy.exc
from sqlalchemy.pool import NullPool

# A worker and its trial process name the same file here, and take turns through a lock on it: one
# connection for the two. The kernel drops the lock of a process that dies, even by SIGKILL.
LOCK_ENV = "HPO_CONNECTION_LOCK"

# A thread waiting longer than this for its turn gets an error its caller treats as a database
# that is briefly unreachable (a worker asks again at its next check), rather than hanging.
WAIT_S = 60


class OneAtATimePool(NullPool):
    """`NullPool` (connect on checkout, close on return) where one thread of the process at a time
    holds connections. That thread may nest a second checkout (Optuna's table creation and
    alembic's check do), so nesting cannot deadlock; other threads wait until it returns them all."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._turn = threading.Condition()
        self._owner: int | None = None
        self._held = 0
        self._lock_fd: int | None = None

    def _do_get(self):
        me = threading.get_ident()
        with self._turn:
            if not self._turn.wait_for(lambda: self._owner in (None, me), timeout=WAIT_S):
                raise sqlalchemy.exc.TimeoutError(f"waited {WAIT_S} s for this process's database connection")
            self._owner, self._held = me, self._held + 1
        try:
            if self._held == 1:
                self._lock_other_processes()
            return super()._do_get()
        except BaseException:
            self._give_back()
            raise

    def _do_return_conn(self, record) -> None:
        try:
            super()._do_return_conn(record)
        finally:
            self._give_back()

    def _give_back(self) -> None:
        with self._turn:
            self._held = max(0, self._held - 1)
            if self._held == 0:
                self._unlock_other_processes()
                self._owner = None
                self._turn.notify_all()

    def _lock_other_processes(self) -> None:
        path = os.environ.get(LOCK_ENV)
        if not path:
            return
        if self._lock_fd is None:
            self._lock_fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
        deadline = time.monotonic() + WAIT_S
        while True:
            try:
                fcntl.flock(self._lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise sqlalchemy.exc.TimeoutError(f"waited {WAIT_S} s for the connection shared through {path}") from None
                time.sleep(0.002)

    def _unlock_other_processes(self) -> None:
        if self._lock_fd is not None:
            fcntl.flock(self._lock_fd, fcntl.LOCK_UN)

    def status(self) -> str:
        return "OneAtATimePool"


def share_connection_with_children() -> None:
    """Make this process and the processes it starts from now on (its trial processes) take turns
    on one connection, through a lock file named in the environment (kept if already set)."""
    if not os.environ.get(LOCK_ENV):
        os.environ[LOCK_ENV] = os.path.join(tempfile.gettempdir(), f"hpo-connection-{os.getpid()}.lock")
