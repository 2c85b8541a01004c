"""Part 2 of the scale benchmark: the sampler's latency as one study grows toward 10,000 trials.

The study (hpo's, with the five knobs as choices) is filled to each size with completed trials
(random values of its own distributions, written in bulk through `optuna_compat`), then a window
of trials is asked and told with hpo's sampler for a ticket (`sampler_for_ticket`), bound to its
ticket on start as a worker binds it, and hpo's own `suggest_config`. Reports the ask time and the
database time (ask + tell) per trial at each size.
"""

from __future__ import annotations

import math
import random
import statistics
import sys
import time

import optuna
from optuna.distributions import CategoricalDistribution

from benchmarks.scale import create_study, space
from benchmarks.scale_db import DbTimer, fresh_database, insert_complete_trials
from hpo.config.space import parse_space
from hpo.runtime import BindOnStart, bind_ticket, sampler_for_ticket, tickets_of
from hpo.storage import BUDGET, engine_of, storage_of
from hpo.study import suggest_config

__all__ = ["run_growth"]

KNOB_CHOICES = {
    "precision": ["fp32", "bf16", "fp16"],
    "attention": ["eager", "sdpa"],
    "optimizer": ["forloop", "foreach", "fused"],
    "grad_checkpointing": [False, True],
    "compile": [False, "default"],
}


def run_growth(admin: str, sizes: list[int], window: int) -> list[dict]:
    url, drop = fresh_database(admin)
    try:
        raw = space("bench-growth", max(sizes) + window * (len(sizes) + 1), systems=KNOB_CHOICES)
        study, hpo_space = create_study(url, raw), parse_space(raw, "<bench>")
        timer, rng, rows = DbTimer(engine_of(storage_of(study))), random.Random(0), []
        distributions = _ask_and_tell(study, hpo_space, timer)[2]  # the space's own, from a real trial
        for size in sizes:
            fill_start = time.perf_counter()
            fill(study, distributions, size - len(study.get_trials(deepcopy=False)), rng)
            filled_s = time.perf_counter() - fill_start
            asks, dbs, _ = zip(*(_ask_and_tell(study, hpo_space, timer) for _ in range(window)))
            rows.append(
                {
                    "size": size,
                    "ask_ms_median": round(statistics.median(asks), 1),
                    "ask_ms_max": round(max(asks), 1),
                    "db_ms_median": round(statistics.median(dbs), 1),
                    "fill_s": round(filled_s, 1),
                }
            )
            print(f"  {size:>6} trials: ask {rows[-1]['ask_ms_median']} ms, db {rows[-1]['db_ms_median']} ms", file=sys.stderr)
        engine_of(storage_of(study)).dispose()
        return rows
    finally:
        drop()


def _ask_and_tell(study: optuna.Study, hpo_space, timer: DbTimer) -> tuple[float, float, dict]:
    """One trial as a worker asks it: (ask ms, database ms for ask + tell, its distributions)."""
    tickets = tickets_of(study)
    serial = tickets.claim()
    started = lambda trial_id: bind_ticket(study, tickets, serial, trial_id)
    study.sampler = BindOnStart(sampler_for_ticket(hpo_space, serial), on_start=started)
    db0, t0 = timer.seconds, time.perf_counter()
    trial = study.ask()
    config = suggest_config(trial, hpo_space)
    ask_ms = 1e3 * (time.perf_counter() - t0)
    study.tell(trial, (config.training.lr - 1e-3) ** 2)
    return ask_ms, 1e3 * (timer.seconds - db0), trial.distributions


def fill(study: optuna.Study, distributions: dict, n: int, rng: random.Random) -> None:
    """Add n completed trials with random values, in bulk (asking and telling 10,000 trials would
    take hours on 2 cores), each paid for with a ticket as a worker's trial would be."""
    if n <= 0:
        return
    trials = [
        {
            "params": {name: (dist, random_value(dist, rng)) for name, dist in distributions.items()},
            "value": rng.random(),
            "user_attrs": {"verdict": "ok"},
        }
        for _ in range(n)
    ]
    insert_complete_trials(study, trials)
    tickets = tickets_of(study)
    with tickets.engine.begin() as conn:
        conn.execute(
            BUDGET.update()
            .where(BUDGET.c.study_name == tickets.study_name)
            .values(claimed=BUDGET.c.claimed + n, issued=BUDGET.c.issued + n)
        )


def random_value(dist, rng: random.Random):
    if isinstance(dist, CategoricalDistribution):
        return rng.choice(dist.choices)
    if isinstance(dist, optuna.distributions.IntDistribution):
        return rng.randint(dist.low, dist.high)
    return math.exp(rng.uniform(math.log(dist.low), math.log(dist.high))) if dist.log else rng.uniform(dist.low, dist.high)
