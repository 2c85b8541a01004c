"""Where each benchmark's result goes: one file per benchmark and host kind,
`benchmarks/results/<benchmark>-<host kind>.json`, replaced when the benchmark is measured again
(its history is git's). Also the environment of the processes a benchmark starts, which import
this package from the repository."""

from __future__ import annotations

import os
from pathlib import Path

from benchmarks.host import cpu_info, host_kind

__all__ = ["COMMIT_ENV", "REPO", "RESULTS", "child_env", "commit", "result_path", "run_meta"]

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "benchmarks" / "results"
COMMIT_ENV = "HPO_BENCH_COMMIT"


def result_path(benchmark: str, cuda_device: str | None = None, suffix: str = ".json") -> Path:
    """The one result file of `benchmark` (with its variant, e.g. `vs-hf-causal_lm-short`) on this
    host; its folder is created if missing."""
    RESULTS.mkdir(parents=True, exist_ok=True)
    return RESULTS / f"{benchmark}-{host_kind(cpu_info()['cpu_flags'], cuda_device)}{suffix}"


def child_env(**extra: str) -> dict[str, str]:
    """This environment with the repository first on PYTHONPATH, so `python -m benchmarks.x` runs
    from any working directory."""
    env = {**os.environ, **extra}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH")) if p)
    return env


def commit() -> str | None:
    """The commit the tree is at: $HPO_BENCH_COMMIT where the caller knows it (a copy of the tree
    sent to a GPU machine may have no .git, and that machine no git), else git's HEAD, else None."""
    import subprocess

    if os.environ.get(COMMIT_ENV):
        return os.environ[COMMIT_ENV]
    try:
        git = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    except OSError:  # no git on this machine: the result still counts, without its commit
        return None
    return git.stdout.strip() or None


def run_meta(argv: list[str]) -> dict:
    """What every result records about its run: the command, the date, the commit and the CPU."""
    import datetime
    import shlex
    import sys

    return {
        "command": shlex.join([Path(sys.executable).name, *argv]),
        "date": datetime.datetime.now().isoformat(timespec="seconds"),
        "commit": commit(),
        **cpu_info(),
    }
