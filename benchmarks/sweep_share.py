"""The opening sweep's share of a probe_first study, first study against a repeated one on the same
machine (issue 38): `python -m benchmarks.sweep_share SPACE.yaml OUT.json [--trials N]`.

Runs `hpo run` twice on SPACE with `study.strategy: probe_first`, as two studies of one model, both
reading and writing one fresh store of this machine's facts. The sweep's time is from the start of
the run to the first trial's start (the sweep, its re-timing, and the study's creation); the share is
that over the run's wall time."""

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


def _run(space: dict, name: str, work: Path, env: dict) -> dict:
    space = {**space, "study": {**space["study"], "name": name}}
    path = work / f"{name}.yaml"
    path.write_text(yaml.safe_dump(space))
    started = time.time()
    subprocess.run([sys.executable, "-m", "hpo.app.cli", "run", str(path), "--in-process"], cwd=work, env=env, check=True)
    wall = time.time() - started
    study = optuna.load_study(study_name=name, storage=f"sqlite:///{work / 'studies' / f'{name}.db'}")
    first = min(t.datetime_start for t in study.trials).timestamp()
    decided = study.user_attrs["hpo:probe_first"]
    done = [t.value for t in study.trials if t.value is not None]
    return {
        "study": name,
        "wall_s": round(wall, 1),
        "sweep_s": round(first - started, 1),
        "sweep_share": round((first - started) / wall, 3),
        "retimed_s": round(decided["timed_again_s"], 2),
        "rows_from_machine": decided.get("from_machine"),
        "dropped": len(decided.get("dropped", [])),
        "best": min(done) if done else None,
        "trials": len(study.trials),
    }


def main() -> None:
    args = argparse.ArgumentParser()
    args.add_argument("space")
    args.add_argument("out")
    args.add_argument("--trials", type=int, default=4)
    opts = args.parse_args()
    space = yaml.safe_load(Path(opts.space).read_text())
    space["study"] = {**space["study"], "strategy": "probe_first", "n_trials": opts.trials}
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        env = {**os.environ, "HPO_MACHINE_FACTS": str(work / "machine-facts")}
        runs = [_run(space, "first", work, env), _run(space, "repeated", work, env)]
    result = {"space": opts.space, "trials": opts.trials, "cpus": os.cpu_count(), "runs": runs}
    result["sweep_s_ratio_repeated_over_first"] = round(runs[1]["sweep_s"] / runs[0]["sweep_s"], 3)
    Path(opts.out).write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
