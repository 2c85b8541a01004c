"""False `slow` verdicts on a busy host, before and after a change to hpo's slow proof (issue 48):
repeated small studies of causal_lm over precision [fp32, bf16] x grad_checkpointing [false, true],
`skip_slow: true`, each from one checkout in a fresh process with a fresh database and machine
facts, the two checkouts alternating, all of it beside 3 x os.cpu_count() spinning processes. Every
`slow` verdict is then timed by a plain side-by-side loop (`false_slow_plain`) under the same load;
a verdict whose plain ratio is under the study's slow_ratio is false."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from benchmarks.false_slow_load import busy_cores, load_average
from benchmarks.false_slow_study import SIZES, run_study
from benchmarks.results import child_env

__all__ = ["is_false_slow", "markdown_table", "run_false_slow", "slow_verdicts", "summarize"]


def slow_verdicts(study: dict) -> list[dict]:
    """The trials of `study` whose verdict is `slow: ...`."""
    return [t for t in study["trials"] if str(t.get("verdict") or "").startswith("slow")]


def is_false_slow(plain_ratio: float | None, slow_ratio: float) -> bool | None:
    """A slow verdict is false when the plain loop measures its knobs under the study's limit;
    None (unknown) when the plain loop gave no ratio."""
    return None if plain_ratio is None else plain_ratio < slow_ratio


def _judged(trial: dict) -> bool:
    """Whether the slow check judged the trial: a `slow` verdict or a recorded slowdown."""
    return str(trial.get("verdict") or "").startswith("slow") or trial.get("slowdown") is not None


def summarize(studies: list[dict]) -> dict:
    """Per side: studies, trials, trials the slow check judged, slow verdicts, false ones (plain ratio under slow_ratio), rate."""
    sides: dict = {}
    for study in studies:
        zero = {"studies": 0, "trials": 0, "judged": 0, "slow": 0, "false_slow": 0, "unconfirmable": 0}
        row = sides.setdefault(study["side"], zero)
        row["studies"] += 1
        row["trials"] += len(study["trials"])
        row["judged"] += sum(_judged(t) for t in study["trials"])
        for trial in slow_verdicts(study):
            row["slow"] += 1
            false = trial.get("false_slow")
            row["false_slow"] += false is True
            row["unconfirmable"] += false is None
    for row in sides.values():
        row["false_slow_rate"] = round(row["false_slow"] / row["slow"], 3) if row["slow"] else None
    return sides


def confirm(trial: dict, slow_ratio: float, rounds: int, threads: int) -> None:
    """The plain loop on `trial`'s knobs, in a fresh process; its result and the rule's answer go on `trial`."""
    knobs = trial.get("knobs_requested") or {}
    command = [sys.executable, "-m", "benchmarks.false_slow_plain", "--precision", knobs.get("precision", "fp32"),
               "--rounds", str(rounds), "--sizes", json.dumps(SIZES)]  # fmt: skip
    if knobs.get("grad_checkpointing"):
        command.append("--checkpointing")
    done = subprocess.run(command, env=child_env(OMP_NUM_THREADS=str(threads)), capture_output=True, text=True)
    plain = json.loads(done.stdout) if done.returncode == 0 else {"error": done.stderr[-2000:]}
    trial["plain"] = plain | {"load_average": load_average()}
    trial["false_slow"] = is_false_slow(plain.get("ratio"), slow_ratio)


def _one(side: str, checkout: Path, folder: Path, seed: int, args) -> dict:
    before = load_average()
    study = run_study(checkout, folder, seed, args)
    study |= {"side": side, "checkout": str(checkout), "load_average_before": before, "load_average_after": load_average()}
    for trial in slow_verdicts(study):
        confirm(trial, args.slow_ratio, args.rounds, args.threads)
    return study


def run_false_slow(args, sides: dict[str, Path], work: Path, on_study: Callable[[list[dict], int], None]) -> list[dict]:
    """`args.studies` studies per side under load, `args.parallel` at once, sides alternating."""
    names = list(sides)
    plan = [(names[(i + k) % 2], i) for i in range(args.studies) for k in range(2)]
    studies: list[dict] = []
    with busy_cores(args.load_factor) as spinners, ThreadPoolExecutor(args.parallel) as pool:
        futures = [pool.submit(_one, s, sides[s], work / f"{s}-{i:03d}", 1000 + i, args) for s, i in plan]
        try:
            for future in futures:
                studies.append(future.result())
                on_study(studies, spinners)
        except BaseException:  # interrupted: start no further study, so the spinners end soon
            pool.shutdown(wait=False, cancel_futures=True)
            raise
    return studies


def markdown_table(summary: dict) -> str:
    """The docs table: one row per side, as `summarize` counts it."""
    lines = [
        "| side | studies | trials | judged for speed | `slow` verdicts | not confirmed (false) | rate |",
        "|---|---|---|---|---|---|---|",
    ]
    for side, row in summary.items():
        rate = "no slow verdict" if row["false_slow_rate"] is None else f"{row['false_slow_rate']:.0%}"
        lines.append(
            f"| {side} | {row['studies']} | {row['trials']} | {row['judged']} | {row['slow']} | {row['false_slow']} | {rate} |"
        )
    return "\n".join(lines)
