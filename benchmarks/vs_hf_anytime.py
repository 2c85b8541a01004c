"""Study-level time to quality: Hugging Face `Trainer.hyperparameter_search`, hpo `joint` and hpo
`probe_first`, side by side under the same wall-clock budget, for several seeds (issue 24).

Each side runs in a fresh process and folder, timed from its launch; it starts trials until the
budget (Optuna's `timeout` on the HF side, `hpo run --timeout` on hpo's; an hpo side is also ended
10 s past the budget), and only trials that completed within `budget_s` of the launch count. The Hugging Face side searches lr as a user would
run it (its defaults: fp32, SDPA, fused AdamW); the hpo sides also search the systems knobs
(`KNOBS`), jointly or decided by the opening sweep.

Per run: the anytime curve, `[seconds since launch, best val_loss so far]` at each completed trial.
Per seed: the time at which each side first reaches the HF search's final best, as a fraction of the
HF search's whole wall time (None: never within the budget). `scripts/bench-vs-hf --budget-s`
prints `table(result)` and writes `result` as JSON, and a PNG of the curves where matplotlib is
installed.
"""

from __future__ import annotations

import dataclasses
import datetime
import math
import os
import shlex
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import optuna
import yaml

from benchmarks.vs_hf import _env, _read_hf, host_info, progress
from benchmarks.vs_hf_task import SearchTask, hpo_space
from hpo.verdicts import Verdict

__all__ = ["KNOBS", "SIDES", "AnytimeBench", "curve", "reach_fractions", "run_anytime", "table"]

SIDES = ("hf", "joint", "probe_first")
KNOBS = {"precision": ["fp32", "bf16"], "attention": ["eager", "sdpa"], "optimizer": ["forloop", "foreach", "fused"]}
MANY = 10_000  # trials asked of each side: the budget ends the search
STUDY = "vs-hf-anytime"


@dataclass(frozen=True, kw_only=True)
class AnytimeBench:
    task: SearchTask
    budget_s: float
    seeds: tuple[int, ...] = (0, 1, 2)
    python: str = sys.executable


def run_anytime(bench: AnytimeBench) -> dict:
    """Every side for every seed (sides alternate within a seed); runs, curves and the figure."""
    runs = []
    for seed in bench.seeds:
        task = dataclasses.replace(bench.task, seed=seed, trials=MANY)
        for side in SIDES:
            progress(f"seed {seed}: {side}, {bench.budget_s:g} s budget, {task.steps} steps per trial")
            runs.append(run_side(side, task, bench))
            progress(f"  {side}: {len(runs[-1]['curve'])} trials counted, best {_last(runs[-1]['curve'])}")
    return {
        "meta": host_info() | {"date": datetime.datetime.now().isoformat(timespec="seconds")},
        "task": bench.task.as_dict() | {"trials": None},
        "budget_s": bench.budget_s,
        "seeds": list(bench.seeds),
        "knobs": KNOBS,
        "runs": runs,
        "figure": reach_fractions(runs, bench.seeds),
    }


def run_side(side: str, task: SearchTask, bench: AnytimeBench) -> dict:
    with tempfile.TemporaryDirectory(prefix=f"hpo-anytime-{side}-") as tmp:
        work = Path(tmp)
        command = _hf_command(task, bench, work) if side == "hf" else _hpo_command(side, task, bench, work)
        launch, start = time.time(), time.perf_counter()
        with open(work / "output.log", "wb") as log:
            rc = _run(command, log, work, _stop_after(side, bench.budget_s))
        wall_s = time.perf_counter() - start
        output = (work / "output.log").read_text(errors="replace")
        if side == "hf" and rc != 0:  # only an hpo side is stopped on purpose
            raise RuntimeError(f"the hf side exited {rc}: {shlex.join(command)}\n{output[-3000:]}")
        trials = _read_hf(work)["trials"] if side == "hf" else _read_hpo(work)
    return {
        "side": side,
        "seed": task.seed,
        "command": shlex.join(command),
        "rc": rc,
        "launch": launch,
        "wall_s": wall_s,
        "trials": trials,
        "curve": curve(trials, launch, bench.budget_s),
        "rejected_by_knob_verdict": sum(1 for t in trials if _knob_rejected(t.get("verdict"))),
        "output_tail": output[-1500:] if rc not in (0, 1) else "",
    }


def _stop_after(side: str, budget_s: float) -> float:
    """When the side's process is ended. hpo's trials are in its study as they complete, so an hpo
    side is stopped shortly after the budget (nothing later counts); the Trainer side writes its
    trials only when its search returns, so it gets Optuna's timeout and a hard stop well past it."""
    return budget_s + 10 if side != "hf" else 3 * budget_s + 300


def _run(command: list[str], log, work: Path, stop_after: float) -> int | str:
    proc = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, cwd=work, env=_env(), start_new_session=True)
    try:
        return proc.wait(timeout=stop_after)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)  # its own session: the trial processes it started go too
        proc.wait()
        return f"stopped after {stop_after:g} s"


def _knob_rejected(verdict: str | None) -> bool:
    return verdict is not None and Verdict.parse(verdict).kind.value in ("incompatible", "slow", "mismatch", "oom")


def _hf_command(task: SearchTask, bench: AnytimeBench, work: Path) -> list[str]:
    return [
        bench.python,
        "-m",
        "benchmarks.vs_hf_trainer",
        *("--task", task.workload, "--steps", str(task.steps), "--trials", str(task.trials), "--n-eval", str(task.n_eval)),
        *("--seed", str(task.seed), "--timeout", str(bench.budget_s)),
        *("--work-dir", str(work), "--out", str(work / "hf.json")),
    ]


def strategy_space(task: SearchTask, strategy: str) -> dict:
    """bench-vs-hf's hpo space with the knobs searched, under `strategy`."""
    space = hpo_space(task, STUDY)
    space["study"] |= {"strategy": strategy}
    space["systems"] |= KNOBS
    return space


def _hpo_command(side: str, task: SearchTask, bench: AnytimeBench, work: Path) -> list[str]:
    space = work / "space.yaml"
    space.write_text(yaml.safe_dump(strategy_space(task, side), sort_keys=False))
    script = Path(bench.python).parent / "hpo"
    hpo = [str(script)] if script.exists() else [bench.python, "-m", "hpo"]
    # One worker, as the Trainer side runs one search process.
    return [*hpo, "run", str(space), "--storage", _storage(work), "--timeout", str(bench.budget_s), "--workers", "1"]


def _storage(work: Path) -> str:
    return f"sqlite:///{work / 'study.db'}"


def _read_hpo(work: Path) -> list[dict]:
    try:
        study = optuna.load_study(study_name=STUDY, storage=_storage(work))
    except KeyError:  # the run ended before creating the study
        return []
    return [
        {
            "number": t.number,
            "state": t.state.name,
            "objective": t.values[0] if t.values else None,
            "params": t.params,
            "complete": t.datetime_complete.timestamp() if t.datetime_complete else None,
            "verdict": t.user_attrs.get("verdict"),
            "knobs": t.user_attrs.get("knobs_requested"),
            "knobs_sweep_rank": t.user_attrs.get("knobs_sweep_rank"),
        }
        for t in study.trials
    ]


def curve(trials: list[dict], launch: float, budget_s: float) -> list[list[float]]:
    """[seconds since launch, best objective so far] at each trial completed within the budget
    with a finite objective (val_loss, minimized)."""
    done = sorted(
        (t["complete"] - launch, t["objective"])
        for t in trials
        if t.get("state") == "COMPLETE" and t.get("complete") is not None and _finite(t.get("objective"))
    )
    points, best = [], math.inf
    for at, value in done:
        if at > budget_s:
            break
        best = min(best, value)
        points.append([at, best])
    return points


def _finite(value) -> bool:
    return isinstance(value, (int, float)) and math.isfinite(value)


def _last(points: list[list[float]]) -> float | None:
    return points[-1][1] if points else None


def reach_fractions(runs: list[dict], seeds) -> dict:
    """Per side: for each seed, when it first reached the HF search's final best, over the HF
    search's whole wall time (None: not within the budget); their median (None if most did not)."""
    per_side: dict[str, list[float | None]] = {side: [] for side in SIDES}
    for seed in seeds:
        hf = next(r for r in runs if r["side"] == "hf" and r["seed"] == seed)
        target = _last(hf["curve"])
        for side in SIDES:
            run = next(r for r in runs if r["side"] == side and r["seed"] == seed)
            reached = next((at for at, best in run["curve"] if target is not None and best <= target), None)
            per_side[side].append(None if reached is None else reached / hf["wall_s"])
    return {
        side: {
            "per_seed": values,
            "median": _median_or_none(values),
            "final_best": [_last(r["curve"]) for r in runs if r["side"] == side],
        }
        for side, values in per_side.items()
    }


def _median_or_none(values: list[float | None]) -> float | None:
    """The median, counting a side that never reached as infinitely late; None when that is the median."""
    ordered = sorted(math.inf if v is None else v for v in values)
    if not ordered:
        return None
    middle = statistics.median(ordered)
    return None if math.isinf(middle) or math.isnan(middle) else middle


def table(result: dict) -> str:
    """The figure as a markdown table, and what the goals of issue 24 ask, measured."""
    meta, figure = result["meta"], result["figure"]
    flags = ", ".join(f"{k} {'yes' if v else 'no'}" for k, v in meta["cpu_flags"].items())
    lines = [
        f"{result['task']['workload']}, {result['task']['steps']} steps per trial, budget {result['budget_s']:g} s, "
        f"seeds {result['seeds']}, on {meta['cpu_model']} ({meta['cpus_usable']} CPUs; {flags})",
        "",
        "| side | reached HF's final best at (fraction of HF's wall time), per seed | median | final best per seed "
        "| trials rejected by a knob verdict |",
        "|---|---|---:|---|---:|",
    ]
    for side in SIDES:
        row = figure[side]
        per_seed = ", ".join("not reached" if v is None else f"{v:.2f}" for v in row["per_seed"])
        best = ", ".join("-" if v is None else f"{v:.4f}" for v in row["final_best"])
        rejected = sum(r["rejected_by_knob_verdict"] for r in result["runs"] if r["side"] == side)
        median = "not reached" if row["median"] is None else f"{row['median']:.2f}"
        lines.append(f"| {side} | {per_seed} | {median} | {best} | {rejected} |")
    return "\n".join(lines)


def plot(result: dict, path: Path) -> bool:
    """The anytime curves as a PNG; False (nothing written) when matplotlib is not installed."""
    from hpo import deps

    if not deps.is_installed("matplotlib"):
        return False
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.5))
    colors = {"hf": "tab:gray", "joint": "tab:blue", "probe_first": "tab:orange"}
    for run in result["runs"]:
        if run["curve"]:
            xs, ys = zip(*run["curve"], strict=True)
            label = run["side"] if run["seed"] == result["seeds"][0] else None
            ax.step(xs, ys, where="post", color=colors[run["side"]], label=label, alpha=0.8)
    ax.set_xlabel("seconds since the command started")
    ax.set_ylabel("best val_loss so far")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return True
