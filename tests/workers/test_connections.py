"""Connections to the database while a real multi-worker study runs: at most one per worker at
peak, none for a worker with nothing to do (`hpo.storage._pools`)."""

from __future__ import annotations

import collections
import subprocess
import sys
import threading
import time

import pytest
import sqlalchemy as sa

from worker_harness import ROOT, hpo_env, space_file, tickets

ACTIVITY = sa.text(
    "SELECT count(*) FILTER (WHERE state IS DISTINCT FROM 'idle'), count(*) FROM pg_stat_activity "
    "WHERE datname = current_database() AND pid <> pg_backend_pid()"
)
# (tickets claimed, trials running, trials complete): where the study is, once hpo has made its tables.
PROGRESS = sa.text(
    "SELECT (SELECT coalesce(sum(claimed), 0) FROM hpo_budget), count(*) FILTER (WHERE state = 'RUNNING'), "
    "count(*) FILTER (WHERE state = 'COMPLETE') FROM trials"
)


def _count_connections(url: str, stop: threading.Event, samples: list[tuple]) -> None:
    """Sample pg_stat_activity every 20 ms, leaving out the sampler's own backend, beside where the
    study is. Each sample: (backends not `idle`, every backend, tickets claimed, trials running,
    trials complete); the last three are None before hpo has made its tables."""
    engine = sa.create_engine(url)
    with engine.connect() as conn:
        while not stop.is_set():
            held, every = conn.execute(ACTIVITY).one()
            conn.rollback()  # each sample sees the current activity, not a snapshot
            try:
                progress = tuple(conn.execute(PROGRESS).one())
            except sa.exc.ProgrammingError:  # no tables yet
                progress = (None, None, None)
            conn.rollback()
            samples.append((held, every, *progress))
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
    stop, samples = threading.Event(), []
    sampler = threading.Thread(target=_count_connections, args=(postgres_url, stop, samples), daemon=True)
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
    assert run.returncode == 0, run.stderr[-30000:]
    assert tickets(postgres_url) == ((n_trials, n_trials), 0)
    counts, raw = [s[0] for s in samples], [s[1] for s in samples]
    # Once every ticket is out, the workers without a running trial are idle. Per sample: backends
    # beyond one per running trial, and how many workers are idle.
    phase = [(s[1] - s[3], workers - s[3]) for s in samples if s[2] == n_trials and s[3]]
    beyond_busy = collections.Counter(extra for extra, _ in phase)
    print(
        f"{workers} workers, {n_trials} trials: {len(counts)} samples, peak {max(counts)} connections; "
        f"with tickets out, backends beyond one per running trial: {beyond_busy}"
    )
    # Every backend counted, idle ones too: a connection kept open between statements (a pooled
    # one) is idle. An idle worker opens one only for the moment it checks for work, so in most
    # samples the idle workers together hold fewer than one each; a pool that keeps a connection
    # open holds at least one per idle worker in every sample.
    assert len(phase) >= 10, f"only {len(phase)} samples once every ticket was out: the phase was not observed"
    held_by_idle = sorted(extra - idle for extra, idle in phase)
    assert held_by_idle[len(held_by_idle) // 2] < 0, f"backends beyond one per running trial, per sample: {phase}"
    assert max(counts) <= workers + 1, f"peak {max(counts)} connections for {workers} workers (samples: {counts})"
    assert max(raw) <= workers + 2, f"peak {max(raw)} backends, torn-down ones included, for {workers} workers"
    # Most of the time nobody holds one: connections last as long as a statement.
    assert sorted(counts)[len(counts) // 2] <= 1, counts
