"""Optuna's own storage tests, run against hpo's storage: `open_storage` on a fresh PostgreSQL
database for each test, as the `RDBStorage` hpo opens and behind Optuna's `_CachedStorage` (what a
study wraps it in).

`scripts/test` fetches them from the installed Optuna's sdist into `storages_tests/` here
(`scripts/_optuna_suite.sh`; never committed: hpo commits none of Optuna's code). Their storage
factory, `optuna.testing.storages.StorageSupplier`, builds hpo's storage instead of a SQLite file,
and the two modules that build an `RDBStorage` themselves (`rdb_tests/test_storage.py`,
`test_cached_storage.py`) get hpo's for every SQLite URL. The tests that cannot apply to a
PostgreSQL storage are left out (`NOT_APPLICABLE`); those where hpo differs by design are expected
to fail, strictly, with the exception the difference raises (`DIFFERS_BY_DESIGN`)."""

from __future__ import annotations

import importlib.util
import os
import sys
import types
import uuid
from pathlib import Path

import pytest
import sqlalchemy as sa

pytest.register_assert_rewrite("optuna.testing.pytest_storages")

if importlib.util.find_spec("fakeredis") is None:
    # optuna.testing.storages imports fakeredis for its journal_redis mode, which no test here runs.
    sys.modules["fakeredis"] = types.ModuleType("fakeredis")

import optuna.testing.storages as optuna_storages  # noqa: E402 - after fakeredis's stand-in
from optuna.storages import RDBStorage, _CachedStorage  # noqa: E402

from hpo.errors import UserInputError  # noqa: E402
from hpo.storage import BUDGET, open_storage  # noqa: E402

SUITE = Path(__file__).parent / "storages_tests"

# Storage mode -> wrapped in Optuna's _CachedStorage. The suite's own names ("sqlite",
# "cached_sqlite", hard-coded in some tests) are hpo's storage too.
MODES = {"hpo_postgres": False, "cached_hpo_postgres": True, "sqlite": False, "cached_sqlite": True}

# Left out, by test id (without its parameters): what each tests is not a storage hpo opens.
NOT_APPLICABLE = {
    **{
        f"rdb_tests/test_storage.py::test_upgrade_{kind}": "upgrades SQLite files that old Optuna versions wrote "
        "(alembic on those files); a PostgreSQL storage has no such file"
        for kind in ("single_objective_optimization", "multi_objective_optimization", "distributions")
    },
    "rdb_tests/test_storage.py::test_init_url_template": "a SQLite file name with {SCHEMA_VERSION} in it",
    "rdb_tests/test_storage.py::test_init_url_that_contains_percent_character": "SQLite file names with % in them",
    "rdb_tests/test_storage.py::test_engine_kwargs": "hpo chooses the engine's pool (OneAtATimePool); "
    "open_storage takes no engine_kwargs",
}

# Expected to fail, strictly, with this exception: hpo differs here on purpose.
DIFFERS_BY_DESIGN = {
    "test_heartbeat.py::test_invalid_heartbeat_interval_and_grace_period": (
        UserInputError,
        "an invalid heartbeat interval or grace period is the user's to fix: hpo raises UserInputError "
        "(one line, exit 2), not Optuna's ValueError",
    ),
    "test_heartbeat.py::test_heartbeat_experimental_warnings": (
        pytest.fail.Exception,
        "open_storage silences Optuna's ExperimentalWarning for heartbeat_interval: it is noise on every start",
    ),
    "rdb_tests/test_storage.py::test_init_db_module_import_error": (
        UserInputError,
        "a missing database driver is the user's to fix: hpo says which extra to install (UserInputError), "
        "not Optuna's ImportError",
    ),
}

POSTGRES_ADMIN = "postgresql+psycopg://postgres@127.0.0.1:5432/postgres"  # as tests/conftest.py's
_database: list[str] = []  # the running test's PostgreSQL URL
_opened: list[RDBStorage] = []  # the storages the running test opened


@pytest.fixture(scope="session")
def _template_database():
    """A database holding what every hpo database holds (Optuna's tables, created by open_storage,
    and hpo's ticket tables, created with each study by `hpo run`), copied for each test: creating
    the tables took about 2 s a test."""
    name = f"hpo_optuna_suite_{uuid.uuid4().hex[:10]}"
    admin = sa.create_engine(POSTGRES_ADMIN, isolation_level="AUTOCOMMIT")
    try:
        with admin.connect() as conn:
            conn.execute(sa.text(f"CREATE DATABASE {name}"))
    except sa.exc.SQLAlchemyError as exc:
        reason = f"PostgreSQL unusable for Optuna's storage suite: {str(exc).splitlines()[0]}"
        if os.environ.get("HPO_REQUIRE_POSTGRES"):
            pytest.fail(reason)
        pytest.skip(reason)
    storage = open_storage(POSTGRES_ADMIN.rsplit("/", 1)[0] + f"/{name}", create=True)
    BUDGET.metadata.create_all(storage.engine)
    storage.engine.dispose()
    yield admin, name
    with admin.connect() as conn:
        conn.execute(sa.text(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)"))
    admin.dispose()


@pytest.fixture(autouse=True)
def _hpo_postgres(request, _template_database, monkeypatch):
    """Each test gets a fresh copy of the template database."""
    admin, template = _template_database
    name = f"{template}_{uuid.uuid4().hex[:6]}"
    with admin.connect() as conn:
        conn.execute(sa.text(f"CREATE DATABASE {name} TEMPLATE {template}"))
    _database.append(POSTGRES_ADMIN.rsplit("/", 1)[0] + f"/{name}")
    if request.module.__name__.endswith(("rdb_tests.test_storage", "test_cached_storage")):
        monkeypatch.setattr(request.module, "RDBStorage", HpoRDBStorage)
    yield
    _database.pop()
    _close_left_sessions()
    with admin.connect() as conn:
        conn.execute(sa.text(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)"))


def _open_hpo_storage(url: str, **kwargs) -> RDBStorage:
    """hpo's storage for a URL a test gave: a SQLite URL stands for the test's PostgreSQL database."""
    storage = open_storage(_database[-1] if url.startswith("sqlite") else url, **kwargs)
    _opened.append(storage)
    return storage


def _close_left_sessions() -> None:
    """Close the sessions a test left open on its storages. `rdb_tests/test_storage.py::test_init`
    queries through `storage.scoped_session()` and never closes it: its connection stayed checked
    out, so the pytest process's turn on connections (`hpo.storage._pools`) stayed with its main
    thread, and in a later test of that process an in-process worker's heartbeat thread waited 60 s
    for it at each trial's end (2 minutes for two trials on CI, and its heartbeats failed)."""
    while _opened:
        storage = _opened.pop()
        storage.scoped_session.remove()
        storage.engine.dispose()


class HpoStorageSupplier(optuna_storages.StorageSupplier):
    def __enter__(self):
        if self.storage_specifier not in MODES:
            raise ValueError(f"storage mode {self.storage_specifier!r} is not one of hpo's: {sorted(MODES)}")
        kwargs = dict(self.extra_args)
        callback = kwargs.pop("heartbeat_stale_trial_callback", None)
        storage = _open_hpo_storage("sqlite://", create=True, **kwargs)
        if callback is not None:  # the test's own callback, in place of hpo's retry with refund
            storage.heartbeat_stale_trial_callback = callback
        self.storage = _CachedStorage(storage) if MODES[self.storage_specifier] else storage
        return self.storage


class HpoRDBStorage(RDBStorage):
    """`RDBStorage(url, ...)` as rdb_tests/test_storage.py and test_cached_storage.py call it,
    answered with hpo's storage; its static helpers stay Optuna's."""

    def __new__(cls, url, engine_kwargs=None, skip_compatibility_check=False, skip_table_creation=False):
        if engine_kwargs:
            raise TypeError(f"hpo's storage takes no engine_kwargs, got {engine_kwargs}")
        return _open_hpo_storage(url, create=not skip_table_creation, check_schema=not skip_compatibility_check)


optuna_storages.STORAGE_MODES = ["hpo_postgres", "cached_hpo_postgres"]
optuna_storages.STORAGE_MODES_HEARTBEAT = ["hpo_postgres", "cached_hpo_postgres"]
optuna_storages.StorageSupplier = HpoStorageSupplier


def pytest_collection_modifyitems(config, items):
    kept, left_out = [], []
    for item in items:
        path = Path(item.path)
        if not path.is_relative_to(SUITE):
            kept.append(item)
            continue
        name = f"{path.relative_to(SUITE).as_posix()}::{item.originalname}"
        if getattr(item, "cls", None) is not None:
            name = f"{path.relative_to(SUITE).as_posix()}::{item.cls.__name__}::{item.originalname}"
        item.add_marker(pytest.mark.postgres)  # the fast layer leaves it out
        if name in NOT_APPLICABLE:
            left_out.append(item)
            continue
        if name in DIFFERS_BY_DESIGN:
            raises, reason = DIFFERS_BY_DESIGN[name]
            item.add_marker(pytest.mark.xfail(raises=raises, reason=reason, strict=True))
        kept.append(item)
    if left_out:
        config.hook.pytest_deselected(items=left_out)
        items[:] = kept
