"""A signal whose handler raises (the in-process deadline's SIGALRM, a worker's SIGTERM) raises only
once the main thread is out of storage code: raised inside a commit, it left a connection with its
transaction open (on SQLite, the file's write lock held), and the worker's clean-up then failed."""

from __future__ import annotations

import os
import signal
import time

import pytest
import sqlalchemy as sa

from hpo.runtime._interrupts import Stopped, stop_on_signals
from hpo.runtime._trial_timeout import InProcessDeadline, TrialTimeout


@pytest.fixture
def slow_commits(tmp_path):
    """A SQLite table whose every commit takes 0.4 s, spent inside SQLAlchemy's commit, and a
    signal to send from inside it (None: none)."""
    engine = sa.create_engine(f"sqlite:///{tmp_path / 'db.sqlite'}")
    rows = sa.Table("rows", sa.MetaData(), sa.Column("n", sa.Integer))
    rows.create(engine)
    send = {"signal": None}

    @sa.event.listens_for(engine, "commit")
    def _slow(conn):
        if send["signal"] is not None:
            os.kill(os.getpid(), send["signal"])
        time.sleep(0.4)

    yield engine, rows, send
    engine.dispose()


def _insert(engine, rows) -> None:
    with engine.begin() as conn:
        conn.execute(rows.insert().values(n=1))


def _wait_for_the_raise(seconds: float) -> None:
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        time.sleep(0.01)


def test_the_in_process_deadline_rings_after_the_commit_it_fell_into(slow_commits):
    engine, rows, _ = slow_commits
    with InProcessDeadline(0.1) as deadline, pytest.raises(TrialTimeout):
        deadline.start()
        _insert(engine, rows)  # the limit passes inside this commit
        committed_at = time.monotonic()
        _wait_for_the_raise(5)
    assert time.monotonic() - committed_at < 1  # rung again soon after, not left to the caller
    with engine.connect() as conn:
        assert conn.execute(sa.select(sa.func.count()).select_from(rows)).scalar() == 1
    assert engine.pool.checkedout() == 0


class NoHandler(Exception):
    """The signal reached the handler the test had before stop_on_signals: it installed none."""


def _no_handler(signum, frame) -> None:
    raise NoHandler(f"{signal.Signals(signum).name} reached the handler from before stop_on_signals")


@pytest.mark.parametrize(("signum", "code", "kind"), [(signal.SIGTERM, 143, "terminated"), (signal.SIGINT, 130, "interrupted")])
def test_a_stop_signal_inside_a_commit_stops_the_worker_once_the_commit_is_done(slow_commits, signum, code, kind):
    engine, rows, send = slow_commits
    # Not ignored, as in a terminal's foreground job (a test run started in the background, CI's `&`
    # or `nohup`, inherits SIGINT ignored, which stop_on_signals rightly leaves ignored). Not the
    # default either: without hpo's handler, SIGINT's would raise KeyboardInterrupt and end the whole
    # pytest session, SIGTERM's would kill it; this one fails this test alone.
    inherited = signal.signal(signum, _no_handler)
    send["signal"], before = signum, signal.getsignal(signum)
    try:
        with stop_on_signals(), pytest.raises(Stopped) as stopped:
            _insert(engine, rows)
            send["signal"] = None
            _wait_for_the_raise(5)
        assert signal.getsignal(signum) == before
    finally:
        signal.signal(signum, inherited)
    assert stopped.value.code == code and stopped.value.verdict.kind.value == kind
    with engine.connect() as conn:
        assert conn.execute(sa.select(sa.func.count()).select_from(rows)).scalar() == 1
    assert engine.pool.checkedout() == 0


def test_a_sigint_inherited_ignored_stays_ignored():
    """`nohup`, or a background job of a shell without job control: Python itself leaves SIGINT ignored."""
    before = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        with stop_on_signals():
            assert signal.getsignal(signal.SIGINT) == signal.SIG_IGN
            assert signal.getsignal(signal.SIGTERM) not in (signal.SIG_DFL, signal.SIG_IGN)
    finally:
        signal.signal(signal.SIGINT, before)
