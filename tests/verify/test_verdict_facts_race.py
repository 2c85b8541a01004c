"""Verdict facts are written insert-if-absent: two worker processes recording the same facts at once
on PostgreSQL never overwrite each other. Each key ends with exactly one record, written by the one
process whose `add` returned True (before, a worker rewrote the record it had read at trial start,
erasing another worker's `slow` verdict)."""

from __future__ import annotations

import multiprocessing

import optuna

from hpo.storage import open_storage
from hpo.verify.stored import StudyVerdicts

KEYS = [f"fact-{i}" for i in range(40)]


def _record_all(url: str, writer: int, start, results) -> None:
    study = optuna.load_study(study_name="race", storage=open_storage(url))
    store = StudyVerdicts(study)
    start.wait()
    results.put((writer, [key for key in KEYS if store.add(key, {"verdict": "ok", "writer": writer})]))


def test_two_processes_recording_the_same_facts_never_overwrite_each_other(postgres_url):
    optuna.create_study(study_name="race", storage=open_storage(postgres_url, create=True))
    context = multiprocessing.get_context("spawn")
    start, results = context.Event(), context.Queue()
    procs = [context.Process(target=_record_all, args=(postgres_url, writer, start, results)) for writer in (1, 2)]
    for proc in procs:
        proc.start()
    start.set()
    won = dict(results.get(timeout=120) for _ in procs)
    for proc in procs:
        proc.join(timeout=60)
    assert sorted(won[1] + won[2]) == sorted(KEYS)  # every key added exactly once, by one of them
    stored = StudyVerdicts(optuna.load_study(study_name="race", storage=open_storage(postgres_url))).all()
    assert {key: record["writer"] for key, record in stored.items()} == {
        key: writer for writer, keys in won.items() for key in keys
    }  # and what is stored is the winner's record, never the loser's
