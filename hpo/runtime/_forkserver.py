"""The forkserver each worker forks its trial processes from (`hpo.runtime._child_trials`).

It imports torch and the trial stack once and warms up the study's workload
(`hpo.runtime._forkserver_warmup`), so a trial process costs a fork rather than a new interpreter. This
module imports neither torch nor Optuna: `hpo run` starts the forkserver before it imports them.
"""

from __future__ import annotations

import multiprocessing
import multiprocessing.context
import multiprocessing.forkserver
import multiprocessing.util
import os
import tempfile

import sqlalchemy.engine
import sqlalchemy.exc

from hpo.config.space import SearchSpace
from hpo.errors import UserInputError
from hpo.runtime._forkserver_warmup import WARMUP_ENV, warmup_env
from hpo.runtime._placement import default_workers, gpus_per_trial
from hpo.storage import share_connection_with_children
from hpo.torch_compat import preloaded_torch_modules
from hpo.workloads.catalog import BUILTIN_WORKLOADS

__all__ = ["PRELOAD", "start_early", "start_forkserver"]

# Imported once in the forkserver rather than in every trial process: torch and torch._dynamo (the
# optimizers and the profiler import it lazily: about 1 s a child otherwise), what opening an Optuna
# storage imports lazily (alembic, the ORM, Optuna's models: about 0.5 s a child otherwise), and the
# trial stack.
PRELOAD = [
    "torch",
    *preloaded_torch_modules(),
    "optuna",
    "optuna.storages._rdb.models",
    "alembic.migration",
    "sqlalchemy.orm",
    "hpo.runtime._child",
    "hpo.study._objective",  # the trial stack; the worker itself never imports torch
]


def start_forkserver(space: SearchSpace, storage_url: str) -> multiprocessing.context.BaseContext:
    """Start this process's forkserver, preloaded and warmed up for the study's workload, and
    return its context. The warm-up runs in the forkserver while this process goes on; a forkserver
    already running is kept, with its warm-up."""
    context = multiprocessing.get_context("forkserver")
    warmup = "hpo.runtime._forkserver_warmup"  # last: it uses what the others import
    context.set_forkserver_preload([*PRELOAD, _workload_module(space), *_driver_modules(storage_url), warmup])
    # The worker and its trial processes (forked from the forkserver) hold one connection between them.
    share_connection_with_children()
    # The study's workload reaches the warm-up through the forkserver's environment, and only its.
    os.environ[WARMUP_ENV] = warmup_env(space)
    try:
        short_socket_folder()
        multiprocessing.forkserver.ensure_running()
    finally:
        del os.environ[WARMUP_ENV]
    return context


# The forkserver listens on a Unix socket at <temp>/pymp-<8 random>/listener-<8 random>
# (multiprocessing.connection.arbitrary_address): 32 characters after the temporary folder, whose
# whole path must fit sun_path (108 bytes on Linux, 104 on macOS) or bind() fails.
SOCKET_PATH_MAX = 104
_RANDOM_NAME = 8  # the random part of multiprocessing's folder and socket names
_LISTENER = len("/listener-") + _RANDOM_NAME
_SOCKET_SUFFIX = len("/pymp-") + _RANDOM_NAME + _LISTENER
_SHORT_FOLDERS = ("/tmp", "/var/tmp", "/usr/tmp")


def short_socket_folder() -> str:
    """Create multiprocessing's temporary folder of this process, which holds the forkserver's
    socket, in a folder short enough for a socket path when the user's TMPDIR is too long for one
    (CPython 3.11 would fail in bind() with "AF_UNIX path too long"), and return it. Only that
    folder moves: hpo's own temporary files stay under the user's TMPDIR."""
    base = tempfile.gettempdir()
    if len(os.fsencode(base)) + _SOCKET_SUFFIX > SOCKET_PATH_MAX:
        short = next((f for f in _SHORT_FOLDERS if _fits(f)), None)
        if short is not None:
            # get_temp_dir() creates the folder once a process, under tempfile.tempdir (public).
            tempfile.tempdir = short
            try:
                multiprocessing.util.get_temp_dir()
            finally:
                tempfile.tempdir = base
    folder = multiprocessing.util.get_temp_dir()
    if len(os.fsencode(folder)) + _LISTENER > SOCKET_PATH_MAX:
        raise UserInputError(
            f"the forkserver's socket path must fit {SOCKET_PATH_MAX} bytes, but its folder {folder!r} is "
            f"{len(os.fsencode(folder))} bytes long: set TMPDIR to a shorter folder or make /tmp writable"
        )
    return folder


def _fits(folder: str) -> bool:
    return len(os.fsencode(folder)) + _SOCKET_SUFFIX <= SOCKET_PATH_MAX and os.access(folder, os.W_OK | os.X_OK)


def start_early(space: SearchSpace, storage_url: str, workers: int | None, isolate: bool) -> None:
    """Start the forkserver now when `run_workers` with these arguments will run the trials in
    this process: its imports and warm-up (about 4 s) then overlap the study's creation."""
    if isolate and (workers or default_workers(gpus_per_trial(space))) == 1:
        start_forkserver(space, storage_url)


def _driver_modules(storage_url: str) -> list[str]:
    """The SQLAlchemy dialect and database driver a storage URL needs (a name that is no module,
    such as SQLite's "pysqlite", is skipped by the forkserver). None for a URL SQLAlchemy cannot
    read: `hpo run` starts the forkserver before it opens the storage, whose error states the rule."""
    try:
        url = sqlalchemy.engine.make_url(storage_url)
        return [url.get_dialect().__module__, url.get_driver_name()]
    except (sqlalchemy.exc.ArgumentError, sqlalchemy.exc.NoSuchModuleError):
        return []


def _workload_module(space: SearchSpace) -> str:
    name = space.spec.workload.name
    return BUILTIN_WORKLOADS.get(name, name).partition(":")[0]
