"""One connection per process and per worker, held only while a statement runs; the pooler option."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time

import pytest
import sqlalchemy as sa
from pool_fork_probe import outsider_can_lock

from hpo.errors import UserInputError
from hpo.storage import _pools as pools
from hpo.storage import open_storage
from hpo.storage._pools import LOCK_ENV, OneAtATimePool, connections_held_by_this_process
from hpo.storage._urls import split_pooler


def test_pooler_option_is_stripped_and_checked():
    assert split_pooler("postgresql+psycopg://u@h:6432/db?hpo_pooler=transaction&sslmode=disable") == (
        "postgresql+psycopg://u@h:6432/db?sslmode=disable",
        "transaction",
    )
    assert split_pooler("sqlite:///x.db") == ("sqlite:///x.db", None)
    with pytest.raises(UserInputError, match="hpo_pooler must be one of transaction, got 'session'"):
        split_pooler("postgresql+psycopg://u@h/db?hpo_pooler=session")


def _engine(tmp_path) -> sa.Engine:
    return sa.create_engine(f"sqlite:///{tmp_path / 'x.db'}", poolclass=OneAtATimePool)


def test_threads_take_turns_and_nothing_is_held_between_statements(tmp_path):
    engine, inside, overlap = _engine(tmp_path), [], []

    def use() -> None:
        for _ in range(20):
            with engine.connect() as conn:
                inside.append(1)
                overlap.append(len(inside))
                conn.execute(sa.text("SELECT 1"))
                time.sleep(0.001)
                inside.pop()

    threads = [threading.Thread(target=use) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert max(overlap) == 1
    assert connections_held_by_this_process() == 0  # every connection went back, and was closed (NullPool)
    with engine.connect() as outer, engine.connect() as nested:  # one thread may nest: no deadlock
        assert outer.execute(sa.text("SELECT 1")).scalar_one() == nested.execute(sa.text("SELECT 2")).scalar_one() - 1


def test_a_thread_that_waits_too_long_is_told_which_thread_holds_the_turn(tmp_path, monkeypatch):
    # Optuna wraps this timeout in a StorageInternalError ("An exception is raised during the
    # commit"), which is all a failed heartbeat test showed on a busy CI machine.
    monkeypatch.setattr(pools, "WAIT_S", 1)
    engine, errors = _engine(tmp_path), []

    def wait_for_a_turn() -> None:
        try:
            with engine.connect():
                pass
        except sa.exc.TimeoutError as exc:
            errors.append(str(exc))

    with engine.connect():
        waiter = threading.Thread(target=wait_for_a_turn)
        waiter.start()
        waiter.join()
    assert len(errors) == 1
    assert errors[0].startswith(
        f"waited 1 s for this process's database connection, held by thread {threading.current_thread().name!r} for "
    ), errors[0]
    assert errors[0].endswith("(1 checked out)"), errors[0]


def test_processes_sharing_the_lock_file_take_turns_and_a_killed_holder_frees_it(tmp_path, monkeypatch):
    lock = tmp_path / "conn.lock"
    monkeypatch.setenv(LOCK_ENV, str(lock))
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            f"import fcntl, os, time; fd = os.open({str(lock)!r}, os.O_RDWR | os.O_CREAT); "
            + "fcntl.flock(fd, fcntl.LOCK_EX); print('held', flush=True); time.sleep(60)",
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert holder.stdout.readline().strip() == "held"
    engine, got = _engine(tmp_path), threading.Event()

    def use() -> None:
        with engine.connect():
            got.set()

    waiter = threading.Thread(target=use)
    waiter.start()
    assert not got.wait(0.5)  # the other process holds the worker's one connection
    holder.kill()  # SIGKILL: the kernel drops its lock
    holder.wait()
    assert got.wait(5)
    waiter.join()


def test_two_engines_in_one_process_share_one_turn_and_one_lock(tmp_path, monkeypatch):
    """A thread holding one engine's connection asks another engine for one: it nests, as within
    one engine, rather than waiting on its own lock file (60 s, then TimeoutError before)."""
    lock = tmp_path / "conn.lock"
    monkeypatch.setenv(LOCK_ENV, str(lock))
    monkeypatch.setattr(pools, "WAIT_S", 3)  # a regression fails in 3 s, not 60
    first, second = _engine(tmp_path), sa.create_engine(f"sqlite:///{tmp_path / 'y.db'}", poolclass=OneAtATimePool)
    other_got, other_done = threading.Event(), threading.Event()

    def other_thread() -> None:
        with second.connect():
            other_got.set()
        other_done.set()

    start = time.monotonic()
    with first.connect() as a:
        with second.connect() as b:
            assert a.execute(sa.text("SELECT 1")).scalar_one() == b.execute(sa.text("SELECT 1")).scalar_one()
            assert connections_held_by_this_process() == 2
        assert time.monotonic() - start < 1
        assert not outsider_can_lock(lock)  # still held: the outer connection is out
        waiter = threading.Thread(target=other_thread)
        waiter.start()
        assert not other_got.wait(0.3)  # another thread waits for this one, whichever engine it asks
    assert other_done.wait(5)
    waiter.join()
    assert connections_held_by_this_process() == 0 and outsider_can_lock(lock)


def test_a_forked_child_neither_shares_nor_releases_its_parents_lock(tmp_path):
    """Forked while idle, the child (sharing the lock file's open file description before) got in
    while its parent held the connection, and its unlock released the parent's lock; forked while
    another thread held it, the child waited for a thread it does not have, then failed."""
    probe = os.path.join(os.path.dirname(__file__), "pool_fork_probe.py")
    done = subprocess.run(
        [sys.executable, probe, str(tmp_path / "conn.lock"), str(tmp_path / "x.db")],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    seen = json.loads(done.stdout)
    assert seen["idle"]["error"] is None and seen["idle"]["waited_s"] >= 0.9  # waited out the parent's turn
    assert seen["idle"]["parent_lock_kept"]
    assert seen["busy"]["error"] is None and 0.9 <= seen["busy"]["waited_s"] < 4


def test_postgres_storage_uses_the_pool_and_no_prepared_statements_behind_a_pooler(postgres_url):
    storage = open_storage(postgres_url + "?hpo_pooler=transaction", create=True)
    assert isinstance(storage.engine.pool, OneAtATimePool)
    assert "hpo_pooler" not in str(storage.engine.url)
    with storage.engine.connect() as conn:
        assert conn.connection.dbapi_connection.prepare_threshold is None
    storage.engine.dispose()
