"""Run by tests/storage/test_pools.py in a fresh Python (no torch, so forking it is safe): a
process that shares its connection through the lock file forks, once while idle and once while
another thread holds the connection, and each child asks for the connection while the parent
holds it. Prints what each child saw, as JSON."""

from __future__ import annotations

import fcntl
import json
import multiprocessing
import os
import sys
import threading
import time

import sqlalchemy as sa

from hpo.storage import _pools as pools

HOLD_S = 1.0


def outsider_can_lock(path: str) -> bool:
    """Whether another process (another open file description) could take the lock now: flock
    conflicts between open file descriptions, so a second open in this process stands for one."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        fcntl.flock(fd, fcntl.LOCK_UN)
        return True
    except BlockingIOError:
        return False
    finally:
        os.close(fd)


def child_connects(engine: sa.Engine, results) -> None:
    start = time.monotonic()
    try:
        with engine.connect() as conn:
            conn.execute(sa.text("SELECT 1"))
        results.put({"waited_s": round(time.monotonic() - start, 3), "error": None})
    except Exception as exc:  # noqa: BLE001 - the test reads which error the child got
        results.put({"waited_s": round(time.monotonic() - start, 3), "error": type(exc).__name__})


def fork_while_idle(engine: sa.Engine, lock: str) -> dict:
    """The child is forked between statements, then asks while the parent holds the connection."""
    results, go = multiprocessing.get_context("fork").SimpleQueue(), multiprocessing.get_context("fork").Event()
    pid = os.fork()
    if pid == 0:
        go.wait()
        child_connects(engine, results)
        os._exit(0)
    with engine.connect() as conn:
        conn.execute(sa.text("SELECT 1"))
        go.set()
        time.sleep(HOLD_S)
        kept = not outsider_can_lock(lock)  # after the child's turn, if it got one inside ours
    os.waitpid(pid, 0)
    return {**results.get(), "parent_lock_kept": kept}


def fork_while_another_thread_holds(engine: sa.Engine) -> dict:
    """Forked (multiprocessing's "fork") while a thread of the parent holds the connection."""
    context = multiprocessing.get_context("fork")
    results, holding, release = context.SimpleQueue(), threading.Event(), threading.Event()

    def hold() -> None:
        with engine.connect() as conn:
            conn.execute(sa.text("SELECT 1"))
            holding.set()
            release.wait()

    holder = threading.Thread(target=hold)
    holder.start()
    holding.wait()
    child = context.Process(target=child_connects, args=(engine, results))
    child.start()
    time.sleep(HOLD_S)
    release.set()
    holder.join()
    child.join()
    return results.get()


def main() -> None:
    lock, db = sys.argv[1:3]
    os.environ[pools.LOCK_ENV] = lock
    pools.WAIT_S = 5  # a child that waits for a thread it does not have gives up in 5 s, not 60
    engine = sa.create_engine(f"sqlite:///{db}", poolclass=pools.OneAtATimePool)
    with engine.connect():
        pass  # the lock file has been opened and locked once
    print(json.dumps({"idle": fork_while_idle(engine, lock), "busy": fork_while_another_thread_holds(engine)}))


if __name__ == "__main__":
    main()
