"""What the scale benchmark measures a database with: driver time, server CPU, fresh databases, and a
bulk insert of completed trials."""

from __future__ import annotations

import datetime
import json
import os
import tempfile
import threading
import time
import uuid
from pathlib import Path

import optuna
import sqlalchemy as sa
from optuna.storages._rdb import models

from hpo.storage import engine_of, storage_of, study_id_of

__all__ = ["DbTimer", "fresh_database", "insert_complete_trials", "percentile", "server_cpu_s"]

DIALECT_CALLS = ("do_execute", "do_executemany", "do_execute_no_params", "do_commit", "do_rollback", "do_ping", "connect")


class DbTimer:
    """Time spent inside the database driver, from every thread of this process."""

    def __init__(self, engine: sa.Engine):
        self.seconds, self.calls, self._lock = 0.0, 0, threading.Lock()
        dialect = engine.dialect
        for name in DIALECT_CALLS:
            setattr(dialect, name, self._timed(getattr(dialect, name)))

    def _timed(self, call):
        def timed(*args, **kwargs):
            start = time.perf_counter()
            try:
                return call(*args, **kwargs)
            finally:
                with self._lock:
                    self.seconds += time.perf_counter() - start
                    self.calls += 1

        return timed


def server_cpu_s() -> float:
    """CPU seconds used so far by a database server running on this machine (PostgreSQL's or
    MariaDB's processes; 0 when none is local). Other clients of the same server count too."""
    total = 0
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            comm, rest = stat.read_text().split(") ", 1)
        except (OSError, ValueError):
            continue
        if comm.rsplit("(", 1)[-1] in ("postgres", "mariadbd", "mysqld"):
            fields = rest.split()
            total += int(fields[11]) + int(fields[12])  # utime, stime
    return total / os.sysconf("SC_CLK_TCK")


def fresh_database(admin: str):
    """A new, empty database beside `admin`'s (SQLite: a temporary file); returns (url, drop)."""
    if admin.startswith("sqlite"):
        folder = tempfile.mkdtemp()
        return f"sqlite:///{folder}/bench.db", lambda: None
    name = f"hpo_bench_{uuid.uuid4().hex[:8]}"
    engine = sa.create_engine(admin, isolation_level="AUTOCOMMIT")
    with engine.connect() as conn:
        conn.execute(sa.text(f"CREATE DATABASE {name}"))
    engine.dispose()

    def drop() -> None:
        cleanup = sa.create_engine(admin, isolation_level="AUTOCOMMIT")
        with cleanup.connect() as conn:
            force = " WITH (FORCE)" if admin.startswith("postgresql") else ""
            conn.execute(sa.text(f"DROP DATABASE IF EXISTS {name}{force}"))
        cleanup.dispose()

    return f"{admin.rsplit('/', 1)[0]}/{name}", drop


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q / 100 * (len(ordered) - 1))))]


def insert_complete_trials(study: optuna.Study, trials: list[dict]) -> None:
    """Write completed trials straight into an RDB storage's tables, in one transaction; each is
    {"params": {name: (distribution, value)}, "value": float, "user_attrs": {key: JSON value}}.
    For a study of thousands of trials: asking and telling them one by one takes hours on a small
    machine. Optuna has no public bulk insert, hence its ORM models (private) here; only the
    benchmarks need it, so it is not in hpo's `optuna_compat`."""

    if not trials:
        return
    study_id, engine = study_id_of(study), engine_of(storage_of(study))
    first = len(study.get_trials(deepcopy=False))
    now = datetime.datetime.now(datetime.timezone.utc).replace(tzinfo=None)
    table = models.TrialModel.__table__
    complete = optuna.trial.TrialState.COMPLETE
    with engine.begin() as conn:
        rows = [
            {"number": first + i, "study_id": study_id, "state": complete, "datetime_start": now, "datetime_complete": now}
            for i in range(len(trials))
        ]
        conn.execute(table.insert(), rows)
        query = sa.select(table.c.trial_id).where(table.c.study_id == study_id, table.c.number >= first).order_by(table.c.number)
        ids = conn.execute(query).scalars().all()
        params = [
            {
                "trial_id": i,
                "param_name": name,
                "param_value": dist.to_internal_repr(value),
                "distribution_json": optuna.distributions.distribution_to_json(dist),
            }
            for i, t in zip(ids, trials)
            for name, (dist, value) in t["params"].items()
        ]
        conn.execute(models.TrialParamModel.__table__.insert(), params)
        finite = models.TrialValueModel.TrialValueType.FINITE
        values = [{"trial_id": i, "objective": 0, "value": t["value"], "value_type": finite} for i, t in zip(ids, trials)]
        conn.execute(models.TrialValueModel.__table__.insert(), values)
        attrs = [
            {"trial_id": i, "key": k, "value_json": json.dumps(v)}
            for i, t in zip(ids, trials)
            for k, v in t["user_attrs"].items()
        ]
        if attrs:
            conn.execute(models.TrialUserAttributeModel.__table__.insert(), attrs)
