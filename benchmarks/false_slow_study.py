"""One small study of `bench-false-slow`, run by `hpo run` from a given checkout in a fresh
process, with its own sqlite database and machine-facts folder, and its trials read back from the
database with sqlite3 (not hpo's code, which differs between the two checkouts compared)."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

__all__ = ["SIZES", "read_trials", "run_study", "space"]

# causal_lm at the quickstart's sizes: checkpointing costs it about 1.2-1.6x, far from slow_ratio.
SIZES = {"d_model": 96, "n_layers": 2, "seq_len": 64, "batch_size": 16}


def space(seed: int, slow_ratio: float, trials: int, steps: int) -> dict:
    """The study: precision [fp32, bf16] x grad_checkpointing [false, true], eager, for-loop AdamW."""
    model = {k: v for k, v in SIZES.items() if k != "batch_size"}
    return {
        "study": {"name": "false-slow", "objectives": ["val_loss"], "directions": ["minimize"],
                  "sampler": {"name": "random", "seed": seed}, "pruner": {"name": "none"},
                  "n_trials": trials, "skip_slow": True, "slow_ratio": slow_ratio},
        "workload": {"name": "causal_lm", "max_steps": steps, "eval_every": steps, **model},
        "params": {"lr": 3.0e-3, "batch_size": SIZES["batch_size"]},
        "systems": {"precision": ["fp32", "bf16"], "attention": "eager", "optimizer": "forloop",
                    "grad_checkpointing": [False, True], "compile": False},
    }  # fmt: skip


def _attrs(db: sqlite3.Connection, trial_id: int) -> dict:
    rows = db.execute("select key, value_json from trial_user_attributes where trial_id = ?", (trial_id,))
    return {key: json.loads(value) for key, value in rows}


def read_trials(db_path: Path) -> list[dict]:
    """Each trial's number, state, verdict, requested knobs and slow-check attributes."""
    keep = (
        "verdict",
        "knobs_requested",
        "slowdown",
        "step_time_ms",
        "slowdown_timed_again",
        "slow_not_confirmed",
        "slow_not_judged",
    )
    with sqlite3.connect(db_path) as db:
        trials = db.execute("select trial_id, number, state from trials order by number").fetchall()
        rows = []
        for trial_id, number, state in trials:
            attrs = _attrs(db, trial_id)
            rows.append({"number": number, "state": state, **{k: attrs.get(k) for k in keep}})
    return rows


def run_study(checkout: Path, folder: Path, seed: int, args) -> dict:
    """`hpo run` of the study from `checkout`, in `folder` (created), torch on `args.threads` threads; its trials and wall time."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "space.json").write_text(json.dumps(space(seed, args.slow_ratio, args.trials, args.steps)))
    env = {
        **os.environ,
        "PYTHONPATH": str(checkout),
        "HPO_MACHINE_FACTS": str(folder / "facts"),
        "OMP_NUM_THREADS": str(args.threads),
    }
    command = [sys.executable, "-m", "hpo", "run", str(folder / "space.json"), "--in-process",
               "--storage", f"sqlite:///{folder / 'study.db'}"]  # fmt: skip
    start = time.monotonic()
    done = subprocess.run(command, cwd=folder, env=env, capture_output=True, text=True)
    (folder / "log.txt").write_text(done.stdout + done.stderr)
    return {"seed": seed, "returncode": done.returncode, "wall_s": round(time.monotonic() - start, 1),
            "trials": read_trials(folder / "study.db") if (folder / "study.db").exists() else []}  # fmt: skip
