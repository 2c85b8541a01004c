"""Connection pooling for many workers on one server: each process holds a database connection
only while it runs a statement, and at most one at a time.

A pooled connection kept open by each worker, trial process and `hpo run` (idle most of the time)
would hold 14 connections for 6 workers, so PostgreSQL's default of 100 would serve about 42.
`OneAtATimePool` opens a connection for each checkout and closes it on return (as SQLAlchemy's
`NullPool` does), and lets one thread of the process hold them at a time, whatever engine they
come from; the others wait for it (a trial's heartbeat thread waits for its objective's write, a
few milliseconds). A worker and its trial processes also take turns, through a lock file
(`LOCK_ENV`). An idle worker holds none. The cost is a connect per transaction, milliseconds to a
local server or PgBouncer, more over TLS to a remote one (docs/scaling.md measures both).
"""

from __future__ import annotations

import contextlib
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


class _ProcessTurn:
    """Which thread of this process holds database connections, shared by every `OneAtATimePool`
    of the process, and the lock file the process holds meanwhile.

    One turn per process, not per engine: a thread that holds one engine's connection and asks
    another engine for one nests (as it does within one engine) instead of waiting for itself,
    and the lock file is locked once, through one open file description. Two turns, each opening
    the file, made that thread wait on its own lock for `WAIT_S`, then fail."""

    def __init__(self) -> None:
        self._start_empty()

    def _start_empty(self) -> None:
        self._cond = threading.Condition()
        self._owner: int | None = None
        self._owner_name, self._owned_since = "", 0.0  # named in a waiter's timeout
        self.held = 0
        self._locked_fd: int | None = None

    def take(self) -> None:
        me = threading.get_ident()
        with self._cond:
            if not self._cond.wait_for(lambda: self._owner in (None, me), timeout=WAIT_S):
                raise sqlalchemy.exc.TimeoutError(self._timed_out())
            if self._owner is None:
                self._owner_name, self._owned_since = threading.current_thread().name, time.monotonic()
            self._owner, self.held = me, self.held + 1
            first = self.held == 1
        if first:
            try:
                self._lock_other_processes()
            except BaseException:
                self.give_back()
                raise

    def _timed_out(self) -> str:
        """Who holds the turn a waiter gave up on: a StorageInternalError that Optuna wraps around
        this timeout then says which thread to look at."""
        held_s = time.monotonic() - self._owned_since
        return (
            f"waited {WAIT_S} s for this process's database connection, held by thread {self._owner_name!r} "
            f"for {held_s:.0f} s ({self.held} checked out)"
        )

    def give_back(self) -> None:
        with self._cond:
            self.held = max(0, self.held - 1)
            if self.held == 0:
                self._unlock_other_processes()
                self._owner = None
                self._cond.notify_all()

    def _lock_other_processes(self) -> None:
        """Lock the file named in `LOCK_ENV`, opened for this turn alone: a process forked later
        never shares an open file description that this one locks again."""
        path = os.environ.get(LOCK_ENV)
        if not path:
            return
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
        deadline = time.monotonic() + WAIT_S
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                self._locked_fd = fd
                return
            except BlockingIOError:
                if time.monotonic() > deadline:
                    os.close(fd)
                    raise sqlalchemy.exc.TimeoutError(f"waited {WAIT_S} s for the connection shared through {path}") from None
                time.sleep(0.002)

    def _unlock_other_processes(self) -> None:
        fd, self._locked_fd = self._locked_fd, None
        if fd is not None:
            try:
                fcntl.flock(fd, fcntl.LOCK_UN)
            finally:
                os.close(fd)

    def forget_in_forked_child(self) -> None:
        """In a child forked from this process, which holds none of its parent's connections.
        The lock file's descriptor the parent may hold is closed here without unlocking it: parent
        and child share its open file description, so the child's unlock would be the parent's,
        and the child's own `flock` would succeed while the parent holds it. The parent's threads
        (an owner among them) do not exist here, and its condition's lock may have been held."""
        if self._locked_fd is not None:
            with contextlib.suppress(OSError):
                os.close(self._locked_fd)
        self._start_empty()


_TURN = _ProcessTurn()
# Every fork path: os.fork, multiprocessing's "fork" start method, a forkserver's children (the
# forkserver itself starts by exec, which closes the descriptor: it is opened close-on-exec).
os.register_at_fork(after_in_child=_TURN.forget_in_forked_child)


class OneAtATimePool(NullPool):
    """`NullPool` (connect on checkout, close on return) where one thread of the process at a time
    holds connections, from this engine or any other. That thread may nest a second checkout
    (Optuna's table creation and alembic's check do, and a second engine may be asked while the
    first's connection is held), so nesting cannot deadlock; other threads wait until it returns
    them all."""

    def _do_get(self):
        _TURN.take()
        try:
            return super()._do_get()
        except BaseException:
            _TURN.give_back()
            raise

    def _do_return_conn(self, record) -> None:
        try:
            super()._do_return_conn(record)
        finally:
            _TURN.give_back()

    def status(self) -> str:
        return "OneAtATimePool"


def connections_held_by_this_process() -> int:
    """How many checked-out connections this process's threads hold (0 between statements)."""
    return _TURN.held


def share_connection_with_children() -> None:
    """Make this process and the processes it starts from now on (its trial processes) take turns
    on one connection, through a lock file named in the environment (kept if already set)."""
    if not os.environ.get(LOCK_ENV):
        os.environ[LOCK_ENV] = os.path.join(tempfile.gettempdir(), f"hpo-connection-{os.getpid()}.lock")
