"""Open an Optuna RDB storage, turning connection problems into one-line user errors."""

from __future__ import annotations

import optuna
import sqlalchemy.exc
from optuna.storages import RDBStorage

from hpo.storage.retry import RetryWithRefund

from hpo.errors import UserInputError
from hpo.storage.urls import ensure_sqlite_folder, mask_password

# A killed worker's trial is failed after grace_period without heartbeats, then retried.
HEARTBEAT_INTERVAL_S = 10
GRACE_PERIOD_S = 30


def open_storage(url: str, *, max_retries: int = 2, heartbeat_interval: int = HEARTBEAT_INTERVAL_S,
                 grace_period: int = GRACE_PERIOD_S) -> RDBStorage:
    ensure_sqlite_folder(url)
    try:
        return RDBStorage(
            url,
            heartbeat_interval=heartbeat_interval,
            grace_period=grace_period,
            failed_trial_callback=RetryWithRefund(max_retry=max_retries),
            engine_kwargs=_engine_kwargs(url),
        )
    except (sqlalchemy.exc.SQLAlchemyError, ImportError, ValueError) as exc:
        raise UserInputError(f"storage {mask_password(url)}: {_reason(exc)}") from None


def _engine_kwargs(url: str) -> dict:
    if url.startswith("postgresql") or url.startswith("mysql"):
        # Fail fast on an unreachable host instead of hanging for minutes; drop dead pooled connections.
        return {"pool_pre_ping": True, "connect_args": {"connect_timeout": 10}}
    return {}


def _reason(exc: BaseException) -> str:
    text = str(getattr(exc, "orig", None) or exc).strip().splitlines()
    first = mask_password(text[0] if text else type(exc).__name__)
    if "password authentication failed" in first or "Access denied" in first:
        return f"authentication failed ({first}); check the user and password in --storage"
    if "does not exist" in first or "Unknown database" in first:
        return f"{first}; create the database first (e.g. createdb NAME)"
    if "Connection refused" in first or "could not translate host" in first or "timeout" in first.lower():
        return f"cannot connect ({first}); check host, port and that the server runs"
    if isinstance(exc, ImportError):
        return f"missing database driver ({first}); pip install 'hpo[postgres]' or 'hpo[mysql]'"
    return first


def load_study_or_none(storage: RDBStorage, name: str) -> optuna.Study | None:
    try:
        return optuna.load_study(study_name=name, storage=storage)
    except KeyError:
        return None
