"""Open an Optuna RDB storage, turning connection problems into one-line user errors.

Only `hpo run` creates a storage (`create=True`); every other command opens an existing one and
writes nothing while doing so, so a mistyped URL or study name leaves no empty database behind.
"""

from __future__ import annotations

import os
import warnings
from pathlib import Path

import optuna
import sqlalchemy.exc
from optuna.storages import RDBStorage

from hpo.errors import StorageUnreachable, UserInputError
from hpo.masking import mask_secrets
from hpo.storage._pools import OneAtATimePool
from hpo.storage._retry import RetryWithRefund
from hpo.storage._urls import ensure_sqlite_folder, split_pooler

# A trial whose process stops sending heartbeats is failed after the grace period, then retried.
# The environment overrides them (tests use 1 s / 3 s rather than waiting half a minute).
HEARTBEAT_INTERVAL_S = 10
GRACE_PERIOD_S = 30
HEARTBEAT_ENV = "HPO_HEARTBEAT_INTERVAL"
GRACE_ENV = "HPO_GRACE_PERIOD"


def open_storage(
    url: str,
    *,
    create: bool = False,
    heartbeat_interval: int | None = None,
    grace_period: int | None = None,
    check_schema: bool = True,
) -> RDBStorage:
    """`check_schema=False` skips Optuna's schema-version check (it reads alembic's migration
    files: 50 ms), for a trial process whose worker opened the same storage already."""
    interval, grace = _liveness(heartbeat_interval, grace_period)
    _refuse_grpc(url)
    _refuse_misread_hosts(url)
    url, pooler = split_pooler(url)
    if create:
        ensure_sqlite_folder(url)
    else:
        _require_sqlite_file(url)
    try:
        with warnings.catch_warnings():
            # heartbeat_interval is "experimental" in Optuna; the warning is noise on every start.
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            return _rdb_storage(url, pooler, interval, grace, create, check_schema)
    # RuntimeError: Optuna found tables of another Optuna version (its message says how to upgrade).
    except (sqlalchemy.exc.SQLAlchemyError, ImportError, ValueError, RuntimeError) as exc:
        raise _storage_error(url, exc) from None
    except optuna.exceptions.StorageInternalError as exc:  # Optuna's wrapper around a database error
        raise _storage_error(url, exc.__cause__ or exc) from None


def _liveness(heartbeat_interval: int | None, grace_period: int | None) -> tuple[int, int]:
    """The heartbeat interval and grace period: given, else from the environment, else the defaults."""
    interval = heartbeat_interval or _seconds_from_env(HEARTBEAT_ENV, HEARTBEAT_INTERVAL_S)
    grace = grace_period or _seconds_from_env(GRACE_ENV, GRACE_PERIOD_S)
    if grace <= interval:
        raise UserInputError(
            f"{GRACE_ENV} ({grace}) must be larger than {HEARTBEAT_ENV} ({interval}), "
            f"or every trial looks dead between two heartbeats; e.g. 3x the interval"
        )
    return interval, grace


def _rdb_storage(url: str, pooler, interval: int, grace: int, create: bool, check_schema: bool) -> RDBStorage:
    return RDBStorage(
        url,
        heartbeat_interval=interval,
        grace_period=grace,
        heartbeat_stale_trial_callback=RetryWithRefund(),
        engine_kwargs=_engine_kwargs(url, pooler),
        skip_table_creation=not create,
        skip_compatibility_check=not check_schema,
    )


def _refuse_grpc(url: str) -> None:
    """Optuna's gRPC proxy has no URL and serves Optuna's calls only (docs/scaling.md tried it)."""
    if url.split(":", 1)[0].lower().startswith("grpc"):
        raise UserInputError(
            f"storage {mask_secrets(url)}: Optuna's gRPC storage proxy is not supported: hpo's workers need SQL on the "
            "study's database (the trial budget, heartbeats, crash recovery), which the proxy does not serve; "
            "reach PostgreSQL through PgBouncer instead (add ?hpo_pooler=transaction to its URL)"
        )


def _refuse_misread_hosts(url: str) -> None:
    """Two URLs SQLAlchemy misreads, refused before anything connects. libpq's list of hosts
    (`@h1:5432,h2:5432/db`) fails in SQLAlchemy's port. And SQLAlchemy reads a password up to its
    first '@': a raw '@' in it makes the rest part of the host, and the driver's error ("failed to
    resolve host 'rest@host'") would show that part of the password."""
    try:
        host = sqlalchemy.engine.make_url(url).host or ""
    except sqlalchemy.exc.ArgumentError:
        return  # not a URL SQLAlchemy parses: opening it says so
    except ValueError:  # its port is no number
        raise UserInputError(
            f"storage {mask_secrets(url)}: SQLAlchemy reads one host[:port] before the database name; list several "
            "hosts as ?host=HOST1:PORT&host=HOST2:PORT (libpq tries them in order)"
        ) from None
    if "@" in host:
        raise UserInputError(
            f"storage {mask_secrets(url)}: its user name or password holds a raw '@', which SQLAlchemy reads as part of "
            "the host; percent-encode it ('@' as %40, ':' as %3A, '/' as %2F: urllib.parse.quote(password, safe=''))"
        )


def _storage_error(url: str, exc: BaseException) -> UserInputError:
    reason = _reason(exc)
    kind = StorageUnreachable if reason.startswith("cannot connect") else UserInputError
    return kind(f"storage {mask_secrets(url)}: {reason}")


def _seconds_from_env(name: str, default: int) -> int:
    raw = os.environ.get(name)
    if raw is None:
        return default
    try:
        value = int(raw)
    except ValueError:
        value = 0
    if value < 1:
        raise UserInputError(
            f"environment variable {name} must be a whole number of seconds >= 1, got {raw!r}; unset it for {default}"
        )
    return value


def _require_sqlite_file(url: str) -> None:
    if not url.startswith("sqlite:///") or url.startswith("sqlite:///:memory:"):
        return
    path = Path(url.removeprefix("sqlite:///").split("?", 1)[0])
    if not path.is_file():
        raise UserInputError(
            f"storage {mask_secrets(url)}: no such file {str(path)!r}; check --storage, or create a study with `hpo run SPACE.yaml`"
        )


def _engine_kwargs(url: str, pooler: str | None = None) -> dict:
    if url.startswith("postgresql") or url.startswith("mysql"):
        connect_args: dict = {"connect_timeout": 10}  # fail fast on an unreachable host
        if pooler is not None and url.startswith("postgresql+psycopg"):
            # A transaction pooler hands each transaction to any server connection, where a
            # statement psycopg prepared on another one does not exist: prepare none.
            connect_args["prepare_threshold"] = None
        # One connection per process at most, held only while a statement runs: hundreds of
        # workers then need no more server connections than run statements at once
        # (`hpo.storage._pools`). A fresh connection is never stale: no pre-ping.
        return {"poolclass": OneAtATimePool, "connect_args": connect_args}
    if url.startswith("sqlite"):
        # Many worker processes share one file: wait for its lock rather than failing after 5 s.
        return {"connect_args": {"timeout": 60}}
    return {}


def _reason(exc: BaseException) -> str:
    text = str(getattr(exc, "orig", None) or exc).strip().splitlines()
    first = mask_secrets(text[0] if text else type(exc).__name__)
    if "password authentication failed" in first or "Access denied" in first:
        return f"authentication failed ({first}); check the user and password in --storage"
    if "version_info" in first:  # Optuna's first query: the database has none of its tables
        return "holds no Optuna studies (it has no Optuna tables); check --storage, or create a study with `hpo run SPACE.yaml`"
    if "does not exist" in first or "Unknown database" in first:
        return f"{first}; create the database first (e.g. createdb NAME) or fix its name in --storage"
    if (
        any(s in first for s in ("Connection refused", "could not translate host", "resolve host", "Can't connect"))
        or "timeout" in first.lower()
    ):
        return f"cannot connect ({first}); check host, port and that the server runs"
    if "Can't load plugin" in first or "Could not parse" in first:
        return f"not a database URL ({first}); use sqlite:///FILE.db, postgresql+psycopg://USER@HOST/DB or mysql+pymysql://USER@HOST/DB"
    if isinstance(exc, ImportError):
        return f"missing database driver ({first}); pip install 'hpo[postgres]' or 'hpo[mysql]'"
    return first


def load_study_or_none(storage: RDBStorage, name: str) -> optuna.Study | None:
    try:
        return optuna.load_study(study_name=name, storage=storage)
    except KeyError:
        return None
