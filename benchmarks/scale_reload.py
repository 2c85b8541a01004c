"""What a trial process does before it trains, as the study grows: before and after the worker
asks the sampler for it (`hpo.runtime._handed`).

Before, each trial process opened the study with an empty Optuna cache, claimed nothing but asked
the sampler itself: Optuna read every trial of the study into that cache, then TPE ran. After, the
worker asks (its cache, kept across trials, reads only what finished since its last ask), and the
trial process opens the study and the one trial it was handed. Each is timed with a fresh storage
object, so its cache starts empty as a new process's does; the worker's ask uses one long-lived
study. The study is filled to each size in bulk (`scale_growth.fill`) with hpo's knobs as choices.
"""

from __future__ import annotations

import random
import statistics
import sys
import time

import optuna

from benchmarks.scale import create_study, space
from benchmarks.scale_db import DbTimer, fresh_database
from benchmarks.scale_growth import KNOB_CHOICES, fill
from hpo.config.space import parse_space
from hpo.runtime import BindOnStart, ask_in_worker, bind_ticket, open_handed, sampler_for_ticket, tickets_of
from hpo.storage import engine_of, open_storage, storage_of
from hpo.study import open_hpo_study, suggest_config

__all__ = ["run_reload"]


def _timed_fresh(url: str, start) -> tuple[optuna.Study, optuna.Trial, tuple[float, float, int]]:
    """`start(storage)` -> (study, trial) with a cold cache; returns them with (ms, db ms, trials
    read), counting the trials where Optuna's cache and `get_all_trials` read them."""
    storage, read = open_storage(url, check_schema=False), []
    real = storage._get_trials

    def counted(*args, **kwargs):
        trials = real(*args, **kwargs)
        read.append(len(trials))
        return trials

    storage._get_trials = counted
    timer, began = DbTimer(engine_of(storage)), time.perf_counter()
    study, trial = start(storage)
    return study, trial, (1e3 * (time.perf_counter() - began), 1e3 * timer.seconds, sum(read))


def _before(url: str, name: str, serial: int):
    """The trial process as it was: open the study, ask the sampler (binding the ticket), sample."""

    def start(storage):
        study, hpo_space = open_hpo_study(storage, name)
        tickets = tickets_of(study)
        study.sampler = BindOnStart(
            sampler_for_ticket(hpo_space, serial), on_start=lambda t: bind_ticket(study, tickets, serial, t)
        )
        trial = study.ask()
        suggest_config(trial, hpo_space)
        return study, trial

    return _timed_fresh(url, start)


def _after(url: str, name: str, trial_id: int):
    """The trial process now: open the study and the trial its worker handed it, read its config."""

    def start(storage):
        study, hpo_space = open_handed(storage, name, trial_id, on_start=lambda t: None)
        trial = study.ask()
        suggest_config(trial, hpo_space)
        return study, trial

    return _timed_fresh(url, start)


def _tell(study: optuna.Study, trial: optuna.Trial) -> None:
    study.tell(trial, random.random())
    engine_of(storage_of(study)).dispose()


def _row(size: int, before: list, worker: list, after: list) -> dict:
    med = lambda rows, i: round(statistics.median(r[i] for r in rows), 1)
    return {
        "size": size,
        "before_trial_process_ms": med(before, 0),
        "before_db_ms": med(before, 1),
        "before_trials_read": med(before, 2),
        "after_worker_ask_ms": med(worker, 0),
        "after_trial_process_ms": med(after, 0),
        "after_db_ms": med(after, 1),
        "after_trials_read": med(after, 2),
    }


def run_reload(admin: str, sizes: list[int], window: int) -> list[dict]:
    url, drop = fresh_database(admin)
    try:
        raw = space("bench-reload", max(sizes) + 2 * window * len(sizes) + 1, systems=KNOB_CHOICES)
        worker_study, hpo_space = create_study(url, raw), parse_space(raw, "<bench>")
        name, tickets, rng, rows = worker_study.study_name, tickets_of(worker_study), random.Random(0), []
        first_id, _ = ask_in_worker(worker_study, hpo_space, tickets.claim(), lambda t: None, "bench")
        distributions = storage_of(worker_study).get_trial(first_id).distributions
        worker_study.tell(worker_study.trials[-1].number, 0.5)
        for size in sizes:
            fill(worker_study, distributions, size - len(worker_study.get_trials(deepcopy=False)), rng)
            before, worker, after = [], [], []
            for _ in range(window):
                study, trial, measured = _before(url, name, tickets.claim())
                before.append(measured)
                _tell(study, trial)
                serial, began = tickets.claim(), time.perf_counter()
                trial_id, _ = ask_in_worker(worker_study, hpo_space, serial, lambda t, s=serial: tickets.bind(s), "bench")
                worker.append((1e3 * (time.perf_counter() - began), 0.0))
                study, trial, measured = _after(url, name, trial_id)
                after.append(measured)
                _tell(study, trial)
            rows.append(_row(size, before, worker, after))
            print(f"  {size:>6} trials: {rows[-1]}", file=sys.stderr, flush=True)
        engine_of(storage_of(worker_study)).dispose()
        return rows
    finally:
        drop()
