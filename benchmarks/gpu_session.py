"""The runner of `scripts/gpu-session`: steps with their own time limits inside one session deadline,
and the files under $OUT rewritten after every step, so a call cut short still brings back what
ran.

Standard library only: it runs before the carried wheels are installed, and every step is a child
process (hpo, a gpu-check stream, a benchmark) started in a process group of its own, so a step
past its limit is killed with everything it started. Parallel jobs of one step share its limit.
What each step runs is `benchmarks.gpu_session_plan`.

Nothing that goes wrong in a step ends the session: a command that cannot start, a job's thread, a
step's `collect` or `poll` that raises, each is recorded on the step and the next step runs. What the
machine lacks (git, the carried wheels, a package, the GPU) is one line each in `record["missing"]`.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["MIN_STEP_S", "Run", "Session", "Step", "broken_step"]

MIN_STEP_S = 10.0  # a step with less of the session than this left (or than its cap) is skipped, and says so
TAIL_LINES = 25
POLL_S = 5.0  # the end of each job's output that goes into the session log


@dataclass(frozen=True)
class Run:
    """One command; with `stdout`, its standard output goes to that file (stderr to the step's log)."""

    argv: Sequence[str]
    stdout: Path | None = None
    stderr_too: bool = False  # with `stdout`: the file gets stderr as well (hpo run's progress lines)

    def __str__(self) -> str:
        return " ".join(self.argv) + (f" > {self.stdout}" if self.stdout else "")


@dataclass(frozen=True)
class Step:
    """One step: `jobs` run in parallel, each a sequence of commands run one after another.
    `collect` reads what the step wrote into the session record once it has ended."""

    name: str
    what: str
    cap_s: float | None  # None: whatever the session has left
    jobs: tuple[tuple[Run, ...], ...]
    env: dict[str, str] = field(default_factory=dict)
    collect: Callable[[dict], None] | None = None
    poll: Callable[[], None] | None = None  # called every few seconds while the step runs


def broken_step(name: str, exc: Exception) -> Step:
    """A step its plan could not build (a file it edits changed): it runs nothing and fails, and the
    session goes on."""
    return Step(name, f"not built: {type(exc).__name__}: {exc}", 0.0, ())


class Session:
    """The session's deadline, its log and its record (`<name>.json`), all under `out`."""

    def __init__(self, out: Path, work: Path, budget_s: float, env: dict[str, str], name: str, record: dict):
        self.out, self.work, self.env, self.name = out, work, env, name
        self.deadline = time.monotonic() + budget_s
        self.record = {**record, "missing": list(record.get("missing", [])), "steps": []}
        out.mkdir(parents=True, exist_ok=True)
        work.mkdir(parents=True, exist_ok=True)
        self.log_path = out / f"{name}.log"

    def remaining(self) -> float:
        return self.deadline - time.monotonic()

    def log(self, text: str) -> None:
        with self.log_path.open("a") as f:
            f.write(text.rstrip("\n") + "\n")

    def missing(self, line: str) -> None:
        """One thing this machine lacks, in the report: the session goes on without it."""
        if line not in self.record["missing"]:
            self.record["missing"].append(line)
            self.log(f"missing: {line}")

    def save(self) -> None:
        path = self.out / f"{self.name}.json"
        path.write_text(json.dumps(self.record, indent=2, default=str) + "\n")

    def run(self, step: Step) -> dict:
        """Run `step` within min(its cap, the time left); record and return how it went."""
        cap = self.remaining() if step.cap_s is None else step.cap_s
        limit = min(cap, self.remaining())
        entry = {"step": step.name, "what": step.what, "cap_s": step.cap_s, "limit_s": round(limit, 1)}
        self.record["steps"].append(entry)
        if not step.jobs:
            entry["result"] = f"failed: {step.what}"
            self.log(f"=== {step.name}: {entry['result']}")
            self.save()
            return entry
        if limit < min(MIN_STEP_S, cap):  # too little of the session left for this step
            entry["result"] = f"skipped: {max(limit, 0):.0f} s left before the session's deadline"
            self.log(f"=== {step.name}: {entry['result']}")
            self.save()
            return entry
        self.log(f"=== {step.name} ({step.what}), limit {limit:.0f} s")
        start, results = time.monotonic(), [None] * len(step.jobs)
        threads = [
            threading.Thread(target=self._job, args=(i, job, start + limit, {**self.env, **step.env}, results))
            for i, job in enumerate(step.jobs)
        ]
        for thread in threads:
            thread.start()
        while any(t.is_alive() for t in threads):
            next(t for t in threads if t.is_alive()).join(POLL_S)
            self._call(entry, "poll_error", step.poll)
        entry |= {"elapsed_s": round(time.monotonic() - start, 1), "jobs": results}
        entry["timed_out"] = any("timeout" in r["rcs"] for r in results)
        entry["result"] = "ok" if all(r["rc"] == 0 for r in results) else "cut short" if entry["timed_out"] else "failed"
        self._call(entry, "poll_error", step.poll)
        self._call(entry, "collect_error", step.collect, self.record)
        self.log(f"=== {step.name}: {entry['result']} in {entry['elapsed_s']} s")
        self.save()
        return entry

    def _call(self, entry: dict, key: str, fn: Callable | None, *args) -> None:
        """A step's poll or collect: whatever it raises (a step that wrote nothing usable, or half a
        file) is recorded on the step, and the session goes on."""
        if fn is None:
            return
        try:
            fn(*args)
        except Exception as exc:  # noqa: BLE001 - any failure here must leave the other steps to run
            entry[key] = f"{type(exc).__name__}: {exc}"
            self.log(f"--- {key}: {entry[key]}")

    def _job(self, index: int, commands: tuple[Run, ...], deadline: float, env: dict, results: list) -> None:
        out_path = self.work / f"job-{len(self.record['steps'])}-{index}.out"
        rcs: list[int | str] = []
        try:
            with out_path.open("w") as out:
                for command in commands:
                    rc = _run(command, out, deadline - time.monotonic(), env, self.work)
                    rcs.append(rc)
                    if rc == "timeout":
                        break
            tail = out_path.read_text(errors="replace").splitlines()[-TAIL_LINES:]
        except Exception as exc:  # noqa: BLE001 - a job that cannot even write its output still has a result
            rcs.append(f"error: {type(exc).__name__}: {exc}")
            tail = []
        self.log(f"--- job {index}: rc {rcs}\n" + "\n".join(tail))
        results[index] = {"commands": [str(c) for c in commands], "rcs": rcs, "rc": _worst(rcs)}


def _run(command: Run, out, limit: float, env: dict, cwd: Path) -> int | str:
    """One command, its output appended to `out` (or to its own file); killed with its whole process
    group at `limit`."""
    if limit <= 0:
        return "timeout"
    out.write(f"$ {command}\n")
    out.flush()
    stdout = command.stdout.open("w") if command.stdout else out
    try:
        stderr = stdout if command.stderr_too else out
        try:
            proc = subprocess.Popen(command.argv, stdout=stdout, stderr=stderr, env=env, cwd=cwd, start_new_session=True)
        except OSError as exc:  # the program is not on this machine
            out.write(f"[not started: {exc}]\n")
            return f"not started: {type(exc).__name__}"
        try:
            return proc.wait(timeout=limit)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            out.write(f"[killed at its step's limit, {limit:.0f} s]\n")
            return "timeout"
    finally:
        if stdout is not out:
            stdout.close()


def _worst(rcs: list[int | str]) -> int | str:
    return next((rc for rc in rcs if rc != 0), 0)
