"""Hugging Face `Trainer.hyperparameter_search` (optuna backend) against `hpo run` on one task
(`benchmarks.vs_hf_task`), back to back. Each side is a process of its own, timed from launch to
exit, so start-up counts; repeats alternate the sides (HF, hpo, HF, hpo, ...).

Per trial both sides report Optuna's own start and end times, the steps run and the median step
time; the Trainer side adds its model_init, training-loop and evaluation seconds
(`benchmarks.vs_hf_trainer`), the hpo side the user attrs its trials record. `scripts/bench-vs-hf`
prints `benchmarks.vs_hf_report.table(result)` and writes `result` as JSON.
"""

from __future__ import annotations

import datetime
import importlib.metadata
import json
import platform
import shlex
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import optuna
import yaml

from benchmarks.host import cpu_info
from benchmarks.results import child_env
from benchmarks.vs_hf_report import summarize
from benchmarks.vs_hf_task import SearchTask, hpo_space
from hpo.errors import HpoError

__all__ = ["HPO_ATTRS", "SIDES", "BenchError", "VsHfBench", "host_info", "run_side", "run_vs_hf"]

SIDES = ("hf", "hpo")
STUDY = "vs-hf"
# The trial user attrs read back from hpo's study; `phases_s` is absent from older hpo versions.
HPO_ATTRS = ("verdict", "train_samples_per_s", "step_time_ms", "steps_run", "train_s", "probe_s", "probe_cached", "trial_s")
HPO_PHASES_ATTR = "phases_s"
VERSIONS = ("torch", "transformers", "accelerate", "optuna", "hpo")


class BenchError(HpoError):
    """One side's run failed; the message has its command and the end of its output."""

    exit_code = 1


@dataclass(frozen=True, kw_only=True)
class VsHfBench:
    """What `scripts/bench-vs-hf` runs: the task, `repeats` times per side, with this Python."""

    task: SearchTask
    repeats: int = 1
    python: str = sys.executable


def progress(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def run_vs_hf(bench: VsHfBench) -> dict:
    """Both sides `repeats` times, alternating; the runs, their summaries and the host."""
    runs = []
    for repeat in range(bench.repeats):
        for side in SIDES:
            progress(f"repeat {repeat + 1}/{bench.repeats}: {side}, {bench.task.trials} trials x {bench.task.steps} steps")
            runs.append(run_side(side, bench, repeat))
            progress(f"  {side}: {runs[-1]['wall_s']:.1f} s")
    return {
        "meta": host_info() | {"date": datetime.datetime.now().isoformat(timespec="seconds"), "repeats": bench.repeats},
        "task": bench.task.as_dict(),
        "runs": runs,
        "summary": {side: summarize([r for r in runs if r["side"] == side]) for side in SIDES},
    }


def run_side(side: str, bench: VsHfBench, repeat: int) -> dict:
    """One search in a fresh process and a fresh temporary directory (so hpo's verdict cache starts empty)."""
    with tempfile.TemporaryDirectory(prefix=f"hpo-vs-hf-{side}-") as tmp:
        work = Path(tmp)
        command = _hf_command(bench, work) if side == "hf" else _hpo_command(bench, work)
        launch, start = time.time(), time.perf_counter()
        with open(work / "output.log", "wb") as log:
            rc = subprocess.call(command, stdout=log, stderr=subprocess.STDOUT, cwd=work, env=_env())
        wall_s, exited = time.perf_counter() - start, time.time()
        if rc != 0:
            tail = (work / "output.log").read_text(errors="replace")[-3000:]
            raise BenchError(f"the {side} side exited {rc}: {shlex.join(command)}\n{tail}")
        found = _read_hf(work) if side == "hf" else _read_hpo(work)
    return {
        "side": side,
        "repeat": repeat,
        "command": shlex.join(command),
        "launch": launch,
        "exit": exited,
        "wall_s": wall_s,
    } | found


def _env() -> dict[str, str]:
    return child_env(KINETO_LOG_LEVEL="5")  # the profiler's start/stop lines are noise


def _hf_command(bench: VsHfBench, work: Path) -> list[str]:
    task = bench.task
    return [
        bench.python,
        "-m",
        "benchmarks.vs_hf_trainer",
        *("--task", task.workload, "--steps", str(task.steps), "--trials", str(task.trials), "--n-eval", str(task.n_eval)),
        *("--work-dir", str(work), "--out", str(work / "hf.json")),
    ]


def _hpo_command(bench: VsHfBench, work: Path) -> list[str]:
    space = work / "space.yaml"
    space.write_text(yaml.safe_dump(hpo_space(bench.task, STUDY), sort_keys=False))
    script = Path(bench.python).parent / "hpo"  # the console script, as a user runs it
    hpo = [str(script)] if script.exists() else [bench.python, "-m", "hpo"]
    return [*hpo, "run", str(space), "--storage", _storage(work)]


def _storage(work: Path) -> str:
    return f"sqlite:///{work / 'study.db'}"


def _read_hf(work: Path) -> dict:
    found = json.loads((work / "hf.json").read_text())
    return {"trials": found.pop("trials"), "details": found}


def _read_hpo(work: Path) -> dict:
    study = optuna.load_study(study_name=STUDY, storage=_storage(work))
    return {"trials": [_hpo_trial(t) for t in study.trials], "details": {"space": (work / "space.yaml").read_text()}}


def _hpo_trial(trial: optuna.trial.FrozenTrial) -> dict:
    attrs = trial.user_attrs
    step_ms = attrs.get("step_time_ms")
    return {
        "number": trial.number,
        "state": trial.state.name,
        "objective": trial.values[0] if trial.values else None,
        "lr": trial.params.get("lr"),
        "start": trial.datetime_start.timestamp() if trial.datetime_start else None,
        "complete": trial.datetime_complete.timestamp() if trial.datetime_complete else None,
        "steps": attrs.get("steps_run"),
        "median_step_s": step_ms / 1000 if step_ms is not None else None,
        "samples_per_s": attrs.get("train_samples_per_s"),
        **{key: attrs.get(key) for key in HPO_ATTRS},
        HPO_PHASES_ATTR: attrs.get(HPO_PHASES_ATTR),  # None where this hpo does not record it
    }


def host_info() -> dict:
    """The CPU (model, flags that matter for bf16 matmuls, cores) and the versions of the stack."""
    return {
        **cpu_info(),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "versions": {name: _version(name) for name in VERSIONS},
    }


def _version(name: str) -> str | None:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None
