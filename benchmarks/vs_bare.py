"""hpo's training loop against a hand-written one: the same config trained both ways, interleaved.

Each round runs `hpo train`'s code on the config (probe, then training) and then the plain loop of
`benchmarks.bare_loop` on it, each in a fresh process (`benchmarks.vs_bare_side`), both measured the
same way from outside the loop (`benchmarks.vs_bare_meter`). The result holds every run and a
summary: hpo / bare throughput over the steady steps and peak memory (goals 0.99x and 1.03x, issue
32), the probe's share of hpo's trial, MFU both ways with hpo's FLOP count, and whether both sides
ended on the same training loss (they train the same weights on the same batches).
`scripts/bench-vs-bare` prints `table(result)` and writes the result as JSON.
"""

from __future__ import annotations

import datetime
import json
import statistics
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch

from benchmarks.bare_loop import check_supported
from benchmarks.host import gpu_info
from benchmarks.results import child_env
from benchmarks.vs_bare_meter import timed_workload_name
from benchmarks.vs_bare_side import ROW_MARK
from hpo.config.resolve import load_config
from hpo.errors import UserInputError

__all__ = ["GOALS", "SIDES", "VsBareBench", "paired_rounds", "round_order", "run_vs_bare", "summarize"]

SIDES = ("hpo", "bare")
GOALS = {"throughput_ratio": 0.99, "peak_mem_ratio": 1.03, "probe_share": 0.05}
MEMORY_MEANS = {
    "cuda": "the CUDA allocator's peak (max_memory_allocated) from the training loop's first batch to its end",
    "cpu": "the process's resident set, sampled after each training forward (hpo's MemoryMeter), from the training loop's first batch",
}


@dataclass(frozen=True, kw_only=True)
class VsBareBench:
    """What to compare; `scripts/bench-vs-bare` fills it from its flags."""

    config: Path
    device: str | None = None  # None: the config's systems.device
    warmup: int = 10  # draws before the timed steps: compile, the evidence step, first calls
    repeats: int = 3
    timeout_s: float = 600.0  # per side and round

    def validate(self) -> None:
        """Refuse what the comparison cannot run, before any training."""
        config = load_config(self.config)
        timed_workload_name(config.workload)
        check_supported(config)
        if not 1 <= self.warmup <= config.training.max_steps - 3:
            raise UserInputError(
                f"--warmup must be between 1 and max_steps - 3 = {config.training.max_steps - 3} "
                f"(some steady steps must be timed), got {self.warmup}"
            )


def run_side(bench: VsBareBench, side: str) -> dict:
    """One side in a fresh process; a crash or time-out is a row that says so."""
    spec = {"side": side, "config": str(bench.config), "device": bench.device, "warmup": bench.warmup}
    command = [sys.executable, "-m", "benchmarks.vs_bare_side", json.dumps(spec)]
    try:
        proc = subprocess.run(
            command, capture_output=True, text=True, timeout=bench.timeout_s, env=child_env(KINETO_LOG_LEVEL="5")
        )
    except subprocess.TimeoutExpired:
        return {"side": side, "verdict": f"crashed: no result within {bench.timeout_s:.0f} s"}
    for line in reversed(proc.stdout.splitlines()):
        if line.startswith(ROW_MARK):
            return json.loads(line.removeprefix(ROW_MARK))
    last = (proc.stderr.strip().splitlines() or ["no output"])[-1][:300]
    return {"side": side, "verdict": f"crashed: exit {proc.returncode}: {last}"}


def _median(values: list[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return statistics.median(present) if present else None


def _ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a is not None and b else None


def _mfu(sps: float | None, hpo: dict) -> float | None:
    flops, peak = hpo.get("model_flops_per_sample"), hpo.get("peak_tflops")
    return sps * flops / 1e12 / peak if sps and flops and peak else None


def paired_rounds(runs: list[dict]) -> list[tuple[dict, dict]]:
    """(hpo, bare) of each round that ran both sides, in round order. Rounds are paired by their
    `round` and `side`, not by position: the side that runs first alternates (`round_order`)."""
    by_round: dict[int, dict[str, dict]] = {}
    for run in runs:
        by_round.setdefault(run["round"], {})[run["side"]] = run
    return [(sides["hpo"], sides["bare"]) for _, sides in sorted(by_round.items()) if set(sides) == set(SIDES)]


def summarize(runs: list[dict]) -> dict:
    """Medians per side and the hpo / bare ratios (of the medians, and per round)."""
    side = {name: [r for r in runs if r["side"] == name and r.get("samples_per_s")] for name in SIDES}
    sps = {name: _median([r["samples_per_s"] for r in rows]) for name, rows in side.items()}
    per_cpu_s = {name: _median([r.get("samples_per_cpu_s") for r in rows]) for name, rows in side.items()}
    peak = {name: _median([r["peak_mem_mb"] for r in rows]) for name, rows in side.items()}
    above = {name: _median([r["peak_mem_mb"] - r["base_mem_mb"] for r in rows]) for name, rows in side.items()}
    hpo_rows = side["hpo"]
    hpo = hpo_rows[0]["hpo"] if hpo_rows else {}
    shares = [r["hpo"]["probe_s"] / r["hpo"]["trial_s"] for r in hpo_rows if r["hpo"].get("trial_s")]
    rounds = paired_rounds(runs)
    losses = [(a.get("last_loss"), b.get("last_loss")) for a, b in rounds]
    return {
        "hpo_samples_per_s": sps["hpo"],
        "bare_samples_per_s": sps["bare"],
        "throughput_ratio": _ratio(sps["hpo"], sps["bare"]),
        "throughput_ratio_per_round": [_ratio(a.get("samples_per_s"), b.get("samples_per_s")) for a, b in rounds],
        # On a CPU only: samples per second of each process's own CPU time, which a busy host changes less.
        "cpu_time_ratio": _ratio(per_cpu_s["hpo"], per_cpu_s["bare"]),
        "hpo_peak_mem_mb": peak["hpo"],
        "bare_peak_mem_mb": peak["bare"],
        "peak_mem_ratio": _ratio(peak["hpo"], peak["bare"]),
        "hpo_mem_above_base_mb": above["hpo"],
        "bare_mem_above_base_mb": above["bare"],
        "mem_above_base_ratio": _ratio(above["hpo"], above["bare"]),
        "probe_share": _median(shares),
        "hpo_reported_samples_per_s": _median([r["hpo"].get("train_samples_per_s") for r in hpo_rows]),
        "hpo_reported_mfu": _median([r["hpo"].get("mfu") for r in hpo_rows]),
        "hpo_mfu": _mfu(sps["hpo"], hpo),
        "bare_mfu": _mfu(sps["bare"], hpo),
        "last_loss_max_rel_diff": max(
            (abs(a - b) / max(abs(b), 1e-12) for a, b in losses if a is not None and b is not None), default=None
        ),
        "goals": GOALS,
    }


def meta(bench: VsBareBench, runs: list[dict]) -> dict:
    first = next((r for r in runs if "device_model" in r), {})
    config = load_config(bench.config)
    return {
        "config": str(bench.config),
        "config_text": bench.config.read_text(),
        "workload": config.workload,
        "workload_options": config.workload_options,
        "knobs": config.knobs.as_dict(),
        "batch_size": config.training.batch_size,
        "steps": config.training.max_steps,
        "warmup": bench.warmup,
        "repeats": bench.repeats,
        "device": first.get("device"),
        "device_model": first.get("device_model"),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        **(gpu_info() if str(first.get("device", "")).startswith("cuda") else {}),
        "threads": torch.get_num_threads(),
        "peak_mem_means": MEMORY_MEANS["cuda" if str(first.get("device", "")).startswith("cuda") else "cpu"],
        "date": datetime.datetime.now().isoformat(timespec="seconds"),
    }


def _progress(line: str) -> None:
    print(line, file=sys.stderr)


def round_order(index: int) -> tuple[str, ...]:
    """The sides of round `index` (from 0): hpo first in even rounds, bare first in odd ones (hpo,
    bare, bare, hpo, ...). A fixed order made every round's first side meet the host's drift first:
    on one core beside another benchmark, hpo first in all 3 rounds read 0.925x of bare."""
    return SIDES if index % 2 == 0 else SIDES[::-1]


def run_vs_bare(bench: VsBareBench, log: Callable[[str], None] = _progress, on_run: Callable[[dict], None] | None = None) -> dict:
    """The whole comparison: {"meta", "runs", "summary"}. Raises UserInputError before any training
    for a config the comparison cannot run. `on_run` gets the result so far after every run, so a
    caller cut short (a GPU session's time limit) keeps what ran."""
    bench.validate()
    runs = []
    for r in range(bench.repeats):
        for side in round_order(r):
            row = {"round": r + 1, **run_side(bench, side)}
            runs.append(row)
            speed = row.get("samples_per_s")
            log(f"[{r + 1}/{bench.repeats}] {side:4s} {row['verdict'][:80]}  " + (f"{speed:.1f} samples/s" if speed else ""))
            if on_run is not None:
                on_run({"meta": meta(bench, runs), "runs": runs, "summary": summarize(runs)})
    return {"meta": meta(bench, runs), "runs": runs, "summary": summarize(runs)}
