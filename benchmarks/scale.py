"""How far one study scales: many local workers, a study growing toward 10,000 trials, and the
per-trial cost of running each trial in its own process. `scripts/bench-scale` calls these.

1. Workers (`run_workers`). W processes each run hpo's own worker loop
   (`hpo.runtime.run_worker`, trials in-process) on one study created by hpo: recovery,
   tickets, heartbeats, hpo's sampler and hpo's objective, which trains a tiny causal LM for two
   steps and records every user attr a real trial records. Reports trials/s, the trial's duration
   from its own timestamps (sampling, probe, training and storage writes), and the database time
   per trial: time inside the database driver, summed over the worker's threads.
2. Sampler latency as the study grows: see `benchmarks.scale_growth`.
3. Isolation (`run_isolation`). The same N-trial study through `hpo run --in-process` and through
   `hpo run` (a forkserver child per trial). Reports the gap between trials, the trial's own
   duration, and worker start-up.

Each part uses a fresh database on the server of the given URL (created and dropped here).
"""

from __future__ import annotations

import multiprocessing
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import optuna
import yaml

from benchmarks.results import child_env
from benchmarks.scale_db import DbTimer, fresh_database, percentile, server_cpu_s
from hpo.config.space import parse_space
from hpo.runtime import quiet_optuna, run_worker, tickets_of
from hpo.storage import engine_of, open_storage
from hpo.study import create_or_resume

__all__ = ["run_isolation", "run_workers", "space"]


SMALL_LM = {"name": "causal_lm", "max_steps": 2, "eval_every": 2, "d_model": 16, "n_heads": 2, "n_layers": 1}
SMALL_LM |= {"seq_len": 16, "eval_batches": 1}
FIXED_KNOBS = {"precision": "fp32", "attention": "eager", "optimizer": "forloop", "compile_backend": "eager"}


def space(name: str, n_trials: int, systems: dict | None = None, sampler: str = "tpe") -> dict:
    """A search space of a tiny causal LM (two steps): the trial's storage traffic is a real
    trial's while its training costs little. `systems` lists knob choices (default: fixed)."""
    return {
        "study": {
            "name": name,
            "sampler": {"name": sampler, "seed": 0},
            "pruner": {"name": "none"},
            "n_trials": n_trials,
            "skip_slow": False,
        },
        "workload": SMALL_LM,
        "params": {"lr": {"low": 1e-5, "high": 1e-2, "log": True}, "weight_decay": {"low": 0.0, "high": 0.1}, "batch_size": 4},
        "systems": systems or FIXED_KNOBS,
    }


def create_study(url: str, raw: dict) -> optuna.Study:
    """The study as `hpo run` creates it: its space, sampler, pruner and ticket budget."""
    return create_or_resume(parse_space(raw, "<bench>"), url)


def _worker(url: str, name: str, start, results) -> None:
    """One worker process: hpo's run_worker, timed from outside."""
    import torch

    torch.set_num_threads(1)  # W workers share the cores
    sys.stderr = open(os.devnull, "w")  # noqa: SIM115 - W progress displays would interleave
    quiet_optuna()
    storage = open_storage(url)
    study = optuna.load_study(study_name=name, storage=storage)
    timer = DbTimer(engine_of(storage))  # run_worker reopens the study on this storage: same engine
    start.wait()
    ran = run_worker(study, url, isolate=False)
    results.put({"trials": ran, "db_s": timer.seconds})


def run_workers(admin: str, workers: int, per_worker: int, systems: dict | None = None, after=None) -> dict:
    """`workers` processes of hpo's worker loop share one study of workers x per_worker trials.
    `after(url, study_name)`, when given, looks at the finished study before its database is
    dropped; its result is the row's "after"."""
    url, drop = fresh_database(admin)
    try:
        name = create_study(url, space("bench-workers", workers * per_worker, systems)).study_name
        ctx = multiprocessing.get_context("fork")  # the parent holds no connection and no thread here
        start, results = ctx.Event(), ctx.Queue()
        procs = [ctx.Process(target=_worker, args=(url, name, start, results)) for _ in range(workers)]
        for proc in procs:
            proc.start()
        time.sleep(2 + workers * 0.05)  # let every worker connect before the clock starts
        began, server_before = time.time(), server_cpu_s()
        start.set()
        done = [results.get(timeout=3600) for _ in procs]
        server = server_cpu_s() - server_before
        for proc in procs:
            proc.join()
        row = _workers_row(url, name, workers * per_worker, procs, done, began, server)
        if after is not None:
            row["after"] = after(url, name)
        return row
    finally:
        drop()


def _workers_row(url, name, budget, procs, done, began, server) -> dict:
    storage = open_storage(url)
    study = optuna.load_study(study_name=name, storage=storage)
    trials = study.get_trials(deepcopy=False, states=[optuna.trial.TrialState.COMPLETE])
    state = tickets_of(study).state()
    storage.engine.dispose()
    if len(trials) != budget or state != (budget, budget):
        print(f"  budget check FAILED: {len(trials)} complete trials, tickets {state}, budget {budget}", file=sys.stderr)
    wall = max(t.datetime_complete.timestamp() for t in trials) - began if trials else float("nan")
    durations = [1e3 * (t.datetime_complete - t.datetime_start).total_seconds() for t in trials]
    db_ms = [1e3 * d["db_s"] / d["trials"] for d in done if d["trials"]]
    return {
        "workers": len(procs),
        "trials": len(trials),
        "wall_s": round(wall, 2),
        "trials_per_s": round(len(trials) / wall, 2),
        "server_cpu_ms_per_trial": round(1e3 * server / max(len(trials), 1), 1),
        "trial_ms_median": round(statistics.median(durations), 2) if durations else None,
        "trial_ms_p95": round(percentile(durations, 95), 1) if durations else None,
        "db_ms_median": round(statistics.median(db_ms), 2) if db_ms else None,
        "failed_workers": sum(p.exitcode != 0 for p in procs),
    }


def run_isolation(admin: str, n_trials: int) -> dict:
    """The same study through `hpo run --in-process` and `hpo run` (a child per trial)."""
    env = child_env(OMP_NUM_THREADS="1", KINETO_LOG_LEVEL="5")
    out = {}
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "space.yaml"
        path.write_text(yaml.safe_dump(space("isolation", n_trials, sampler="random")))
        for mode, extra in (("in_process", ["--in-process"]), ("child_per_trial", [])):
            url, drop = fresh_database(admin)
            try:
                start = time.perf_counter()
                cmd = [sys.executable, "-m", "hpo.app.cli", "run", str(path), "--storage", url, *extra]
                proc = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=tmp)
                if proc.returncode != 0:
                    raise RuntimeError(f"hpo run failed (exit code {proc.returncode}):\n{proc.stderr[-3000:]}")
                out[mode] = trial_timing(url, time.perf_counter() - start)
            finally:
                drop()
    out["overhead_per_trial_ms"] = round(out["child_per_trial"]["per_trial_ms"] - out["in_process"]["per_trial_ms"], 1)
    return out


def trial_timing(url: str, wall: float) -> dict:
    storage = open_storage(url)
    trials = optuna.load_study(study_name="isolation", storage=storage).get_trials(deepcopy=False)
    storage.engine.dispose()
    gaps = [1e3 * (b.datetime_start - a.datetime_complete).total_seconds() for a, b in zip(trials, trials[1:])]
    runs = [1e3 * (t.datetime_complete - t.datetime_start).total_seconds() for t in trials]
    later = statistics.median(g + r for g, r in zip(gaps, runs[1:]))  # trial 1 on: worker start-up excluded
    return {
        "trials": len(trials),
        "wall_s": round(wall, 1),
        "gap_between_trials_ms": round(statistics.median(gaps), 1),
        "trial_duration_ms": round(statistics.median(runs[1:]), 1),
        "first_trial_ms": round(runs[0], 1),
        "per_trial_ms": round(later, 1),
    }
