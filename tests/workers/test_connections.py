"""Connections to the database while a real multi-worker study runs: at most one per worker at
peak, none for a worker with nothing to do (`hpo.storage.pools`)."""

from __future__ import annotations

import subprocess
import sys
import threading
import time

import pytest
import sqlalchemy as sa

from worker_harness import ROOT, hpo_env, space_file, tickets

ADMIN = "postgresql+psycopg://postgres@127.0.0.1:5432/postgres"


def _count_connections(database: str, stop: threading.Event, counts: list[int], raw: list[int]) -> None:
    """Sample pg_stat_activity every 20 ms, from another database so the sampler is not counted.
    `counts` leaves out backends in state `idle`: hpo's pool closes its connection when a
    transaction ends and holds none between statements, so an idle backend is one whose client has
    closed it and that the server has not finished tearing down (seen on a loaded CI host: one
    extra for a sample or two while four workers started). `raw` counts every backend."""
    engine = sa.create_engine(ADMIN)
    query = sa.text(
        "SELECT count(*) FILTER (WHERE state IS DISTINCT FROM 'idle'), count(*) FROM pg_stat_activity WHERE datname = :db"
    )
    with engine.connect() as conn:
        while not stop.is_set():
            held, every = conn.execute(query, {"db": database}).one()
            counts.append(held)
            raw.append(every)
            conn.rollback()  # each sample sees the current activity, not a snapshot
            time.sleep(0.02)
    engine.dispose()


@pytest.mark.slow
@pytest.mark.timeout(300)
@pytest.mark.parametrize(("workers", "n_trials"), [(4, 5)])
def test_at_most_one_connection_per_busy_worker_and_none_for_an_idle_one(postgres_url, tmp_path, workers, n_trials):
    """4 workers, 5 trials, one run: all four train a trial, then one trains the fifth while three
    find no ticket and wait (a trial could still need a retry) holding no connection. Every worker queries at its start
    (open the study, claim), so the bound over the whole run is one per worker, idle or not, plus
    one for `hpo run`'s own process: it opens the study while its workers start (sampled on a
    loaded host: four backends for three workers, all in Optuna's schema check on open). A cluster
    runs `hpo worker` alone, with no such process."""
    database = postgres_url.rsplit("/", 1)[1]
    stop, counts, raw = threading.Event(), [], []
    sampler = threading.Thread(target=_count_connections, args=(database, stop, counts, raw), daemon=True)
    sampler.start()
    run = subprocess.run(
        [sys.executable, "-m", "hpo.app.cli", "run", str(space_file(tmp_path, n_trials=n_trials)), "--storage", postgres_url]
        + ["--workers", str(workers)],
        capture_output=True,
        text=True,
        timeout=240,
        env=hpo_env(),
        cwd=ROOT,
    )
    stop.set()
    sampler.join()
    assert run.returncode == 0, run.stderr[-3000:]
    assert tickets(postgres_url) == ((n_trials, n_trials), 0)
    print(f"{workers} workers, {n_trials} trials: {len(counts)} samples, peak {max(counts)} connections")
    assert max(counts) <= workers + 1, f"peak {max(counts)} connections for {workers} workers (samples: {counts})"
    assert max(raw) <= workers + 2, f"peak {max(raw)} backends, torn-down ones included, for {workers} workers"
    # Most of the time nobody holds one: connections last as long as a statement.
    assert sorted(counts)[len(counts) // 2] <= 1, counts
