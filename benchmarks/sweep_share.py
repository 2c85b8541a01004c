"""The opening sweep's share of a probe_first study, on a first study and a repeated one on the same
machine, beside a joint study of the same space (issue 38):
`python -m benchmarks.sweep_share SPACE.yaml OUT.json [--trials N]`.

Runs `hpo run` three times on SPACE, each a new study, one after the other on one machine: probe_first
(`first`), probe_first again (`repeated`: both read and write one fresh store of this machine's facts,
so the second reuses what the first proved), and joint. For each run:
- `sweep_s`: the sweep and its race, as the decision records it (`hpo.strategy.decide`);
- `to_first_trial_s`: from the run's start to its first trial's start (start-up, machine check, study
  creation, and for probe_first the sweep); joint's is the same start-up without a sweep;
- `sweep_share`: `sweep_s` over the run's wall time;
- `to_K_trained_over_joint`: the time to the end of the K-th trial that trained over joint's, K the
  fewest trained trials of the three runs: at the same trial count a joint study's trial ended by a
  verdict (a slow fp16, proven in 2 s) stands beside a probe_first trial that trained its budget;
- `over_joint_s`: `to_first_trial_s` less joint's: what the sweep costs before the first trial beyond
  what a joint study pays to start. Start-up work the sweep does first (importing torch._dynamo for
  the optimizers, say) a joint study does in its first trial instead, so this can be below `sweep_s`.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import optuna
import yaml

from hpo.records import RecordKey

SHOWN_KNOBS = ("precision", "attention", "optimizer")


def _run(space: dict, name: str, strategy: str, work: Path, env: dict) -> dict:
    space = {**space, "study": {**space["study"], "name": name, "strategy": strategy}}
    path = work / f"{name}.yaml"
    path.write_text(yaml.safe_dump(space))
    started = time.time()
    subprocess.run([sys.executable, "-m", "hpo.app.cli", "run", str(path), "--in-process"], cwd=work, env=env, check=True)
    wall = time.time() - started
    study = optuna.load_study(study_name=name, storage=f"sqlite:///{work / 'studies' / f'{name}.db'}")
    first = min(t.datetime_start for t in study.trials).timestamp()
    decided = study.user_attrs.get("hpo:probe_first") or {}
    done = [t.value for t in study.trials if t.value is not None]
    sweep_s = decided.get("sweep_s", 0.0)
    return {
        "study": name,
        "strategy": strategy,
        "wall_s": round(wall, 1),
        "to_first_trial_s": round(first - started, 1),
        "sweep_s": round(sweep_s, 2),
        "sweep_share": round(sweep_s / wall, 3),
        "raced_s": round(decided.get("timed_again_s", 0.0), 2),
        "race_timings": decided.get("timings"),
        "rows_from_machine": decided.get("from_machine"),
        # Precisions whose stored race a faster confirming step discarded (raced afresh): why a
        # repeated study timed more than its front runners once.
        "stored_discarded": sorted(decided.get("discarded") or {}),
        "dropped": len(decided.get("dropped", [])),
        "kept": [k["knobs"] for k in decided.get("kept", [])],
        "best": min(done) if done else None,
        "trials": len(study.trials),
        # Per trial, so a wall time at the same trial count can be read: a trial that ended on a
        # verdict (a slow fp16 in a joint study, say) ran for less than its budget.
        "per_trial": [_trial_facts(t) for t in study.trials],
        # When each trial that trained ended, from the run's start: the runs are compared at the
        # same count of trained trials, since a trial ended by a verdict trains nothing.
        "trained_ends_s": sorted(
            round(t.datetime_complete.timestamp() - started, 1)
            for t in study.trials
            if t.datetime_complete is not None and t.user_attrs.get(RecordKey.STEPS_RUN)
        ),
    }


def _trial_facts(trial: optuna.trial.FrozenTrial) -> dict:
    attrs = trial.user_attrs
    ended = trial.datetime_complete or trial.datetime_start
    return {
        "number": trial.number,
        "state": trial.state.name,
        "s": round((ended - trial.datetime_start).total_seconds(), 1),
        "verdict": str(attrs.get(RecordKey.VERDICT, ""))[:80] or None,
        "steps_run": attrs.get(RecordKey.STEPS_RUN),
        "knobs": {k: v for k, v in (attrs.get(RecordKey.KNOBS_REQUESTED) or {}).items() if k in SHOWN_KNOBS},
    }


def main() -> None:
    args = argparse.ArgumentParser()
    args.add_argument("space")
    args.add_argument("out")
    args.add_argument("--trials", type=int, default=4)
    opts = args.parse_args()
    space = yaml.safe_load(Path(opts.space).read_text())
    space["study"] = {**space["study"], "n_trials": opts.trials}
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        env = {**os.environ, "HPO_MACHINE_FACTS": str(work / "machine-facts")}
        runs = [
            _run(space, "first", "probe_first", work, env),
            _run(space, "repeated", "probe_first", work, env),
            _run(space, "joint", "joint", work, env),
        ]
    joint = runs[-1]
    trained = min(len(run["trained_ends_s"]) for run in runs)
    for run in runs[:2]:
        run["over_joint_s"] = round(run["to_first_trial_s"] - joint["to_first_trial_s"], 1)
        run["wall_over_joint"] = round(run["wall_s"] / joint["wall_s"], 3)
        if trained:
            at, joint_at = run["trained_ends_s"][trained - 1], joint["trained_ends_s"][trained - 1]
            run[f"to_{trained}_trained_over_joint"] = round(at / joint_at, 3)
    result = {"space": opts.space, "trials": opts.trials, "cpus": os.cpu_count(), "runs": runs}
    Path(opts.out).write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
