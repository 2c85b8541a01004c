"""Helpers for the worker tests: a tiny space file, `hpo` subprocesses with short heartbeats, and
reading back what the study recorded."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import optuna
from space_files import write_space

from hpo.config.space import load_space
from hpo.storage import TicketBudget, engine_of, open_storage
from hpo.study import create_or_resume

ROOT = Path(__file__).resolve().parents[2]
STUDY = "workers"
SECRET = "s3cret"  # a storage password that must never show
# Short heartbeats, so that a killed worker's trial is failed within seconds, not half a minute.
HEARTBEAT_S, GRACE_S = 1, 3


def space_file(
    tmp_path: Path,
    n_trials: int,
    *,
    max_retries: int = 2,
    workload: str = "toy_workloads:Toy",
    trial_timeout_s: float | None = None,
    optimizer: str | list[str] = "forloop",
    memory_limit_gb: float | None = None,
    **options,
) -> Path:
    """A search space whose trials take about a second: a tiny toy model, two steps, fixed knobs
    (unless `optimizer` is a list)."""
    space = {
        "study": {
            "name": STUDY,
            "objectives": ["val_loss"],
            "directions": ["minimize"],
            "sampler": {"name": "random", "seed": 0},
            "pruner": {"name": "none"},
            "n_trials": n_trials,
            "max_retries": max_retries,
            "skip_slow": False,
            "trial_timeout_s": trial_timeout_s,
            **({} if memory_limit_gb is None else {"memory_limit_gb": memory_limit_gb}),
        },
        "workload": {
            "name": workload,
            "max_steps": 2,
            "eval_every": 2,
            "d_model": 8,
            "n_heads": 2,
            "seq_len": 8,
            "n_blocks": 1,
            **options,
        },
        "params": {"lr": {"low": 1.0e-4, "high": 1.0e-2, "log": True}, "batch_size": 8},
        "systems": {
            "precision": "fp32",
            "attention": "eager",
            "optimizer": optimizer,
            "grad_checkpointing": False,
            "compile": False,
            "compile_backend": "eager",
        },
    }
    return write_space(tmp_path / f"space-{time.monotonic_ns()}.yaml", space, sort_keys=False)


def hpo_env(**extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env.update(
        PYTHONPATH=os.pathsep.join([str(ROOT), str(ROOT / "tests"), str(ROOT / "tests" / "workers")]),
        OMP_NUM_THREADS="1",  # several trial processes share 2 cores: no thread oversubscription
        HPO_HEARTBEAT_INTERVAL=str(HEARTBEAT_S),
        HPO_GRACE_PERIOD=str(GRACE_S),
        KINETO_LOG_LEVEL="5",
    )
    env.update(extra)
    return env


def hpo(*args: str | Path, timeout: float = 240, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "hpo.app.cli", *map(str, args)],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env or hpo_env(),
        cwd=ROOT,
    )


def start_worker(storage_url: str, *extra: str, log: Path) -> subprocess.Popen:
    """`hpo worker` in its own session, so a test can kill it with its whole process group."""
    with open(log, "w") as out:
        return subprocess.Popen(
            [sys.executable, "-m", "hpo.app.cli", "worker", "--study", STUDY, *extra],
            env=hpo_env(HPO_STORAGE=storage_url),
            stdout=out,
            stderr=subprocess.STDOUT,
            cwd=ROOT,
            start_new_session=True,
        )


def create_study(space: Path, storage_url: str) -> None:
    create_or_resume(load_space(space), storage_url)


def trials(storage_url: str, study: str = STUDY) -> list[optuna.trial.FrozenTrial]:
    storage = open_storage(storage_url)
    try:
        return optuna.load_study(study_name=study, storage=storage).get_trials()
    finally:
        storage.engine.dispose()


def tickets(storage_url: str, study: str = STUDY) -> tuple[tuple[int, int], int]:
    """((claimed, budget), pending claims) of the study's ticket budget."""
    storage = open_storage(storage_url)
    try:
        budget = TicketBudget(engine_of(storage), study)
        return budget.state(), budget.pending()
    finally:
        storage.engine.dispose()


def wait_for(predicate, timeout: float, what: str, interval: float = 0.2):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout} s waiting for {what}")


def descendants(pid: int) -> set[int]:
    """Every live process below `pid` (from /proc: Linux only, like PR_SET_PDEATHSIG)."""
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if fields[0] != "Z":  # a zombie has exited already
            children.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    found, todo = set(), [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.add(child)
            todo.append(child)
    return found


def alive(pids: set[int]) -> set[int]:
    live = set()
    for pid in pids:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if state != "Z":
            live.add(pid)
    return live


def kill_group(proc: subprocess.Popen) -> None:
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(timeout=30)
