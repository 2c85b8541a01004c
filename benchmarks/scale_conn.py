"""Connections at scale: W lightweight worker processes on one PostgreSQL study, directly or
through PgBouncer, while `pg_stat_activity` is sampled. `scripts/bench-scale-conn` calls this.

A lightweight worker runs hpo's ticket budget and Optuna's ask/tell with no training: it claims a
ticket, asks a trial (random sampler), binds the ticket, writes one user attr per field of a real
trial's record (`hpo.records.TrialRecord`: as many writes as a real trial makes), and tells
a value. So trials/s and database time per trial measure the storage path alone.
"""

from __future__ import annotations

import multiprocessing
import threading
import time
import warnings

import optuna
import sqlalchemy as sa

from benchmarks.scale import create_study, space
from benchmarks.scale_db import DbTimer, fresh_database
from hpo.records import TrialRecord
from hpo.runtime import quiet_optuna, tickets_of
from hpo.storage import engine_of, open_storage

__all__ = ["run_connections"]


def _worker(url: str, name: str, start, results) -> None:
    quiet_optuna()
    warnings.filterwarnings("ignore", message="Heartbeat of storage")  # ask/tell with hpo's heartbeat settings
    ran, errors, db_s, message = 0, 0, 0.0, None
    try:
        storage = open_storage(url, check_schema=False)
        timer = DbTimer(engine_of(storage))
        study = optuna.load_study(study_name=name, storage=storage, sampler=optuna.samplers.RandomSampler())
        tickets = tickets_of(study)
        start.wait()
        while (serial := tickets.claim()) is not None:
            trial = study.ask()
            tickets.bind(serial)
            for field in TrialRecord.model_fields:
                trial.set_user_attr(field, "x" * 16)
            study.tell(trial, trial.suggest_float("lr", 1e-5, 1e-2, log=True))
            ran += 1
        db_s = timer.seconds
    except Exception as exc:  # noqa: BLE001 - counted and reported: the benchmark's errors must be 0
        errors, message = errors + 1, f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
    results.put({"trials": ran, "errors": errors, "db_s": db_s, "message": message})


def _sample(admin: str, database: str, stop: threading.Event, counts: list[int]) -> None:
    engine = sa.create_engine(admin)
    query = sa.text("SELECT count(*) FROM pg_stat_activity WHERE datname = :db")
    with engine.connect() as conn:
        while not stop.is_set():
            counts.append(conn.execute(query, {"db": database}).scalar_one())
            conn.rollback()
            time.sleep(0.02)
    engine.dispose()


def run_connections(admin: str, workers: int, per_worker: int, pooler: str | None = None) -> dict:
    """`pooler`: "host:port" of a PgBouncer in transaction mode in front of `admin`'s server."""
    url, drop = fresh_database(admin)
    database = url.rsplit("/", 1)[1]
    via = url if pooler is None else url.replace(url.split("@", 1)[1].split("/", 1)[0], pooler) + "?hpo_pooler=transaction"
    try:
        name = create_study(url, space("bench-conn", workers * per_worker, sampler="random")).study_name
        ctx = multiprocessing.get_context("fork")
        start, results = ctx.Event(), ctx.Queue()
        procs = [ctx.Process(target=_worker, args=(via, name, start, results)) for _ in range(workers)]
        for proc in procs:
            proc.start()
        time.sleep(2 + workers * 0.05)
        stop, counts = threading.Event(), []
        sampler = threading.Thread(target=_sample, args=(admin, database, stop, counts), daemon=True)
        sampler.start()
        began = time.perf_counter()
        start.set()
        done = [results.get(timeout=3600) for _ in procs]
        wall = time.perf_counter() - began
        stop.set()
        sampler.join()
        for proc in procs:
            proc.join()
        ran = sum(d["trials"] for d in done)
        return {
            "workers": workers,
            "via": "pgbouncer" if pooler else "postgres",
            "trials": ran,
            "budget": workers * per_worker,
            "wall_s": round(wall, 2),
            "trials_per_s": round(ran / wall, 1),
            "db_ms_per_trial": round(1e3 * sum(d["db_s"] for d in done) / max(ran, 1), 1),
            "peak_connections": max(counts, default=0),
            "median_connections": sorted(counts)[len(counts) // 2] if counts else 0,
            "errors": sum(d["errors"] for d in done),
            "error_messages": sorted({d["message"] for d in done if d["message"]}),
        }
    finally:
        drop()
