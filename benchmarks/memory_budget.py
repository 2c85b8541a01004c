"""Memory as a budget (issue 39): what `batch_size: auto` buys with and without gradient
checkpointing under one memory limit, on a causal LM too large for that limit at the batch
checkpointing lets it reach.

Each row is one `hpo train` of the config in its own process (a CPU's resident set never shrinks,
so rows in one process would inherit each other's peaks), with `study.memory_limit_gb` set and
`batch_size: {auto: {max, multiple_of}}`, per precision: checkpointing on, then off. Last, the
batch checkpointing chose is run without checkpointing: hpo should reject it before training
(`oom: predicted ...`). Every row keeps the model's prediction beside the measured peak, so the
prediction's error is read from the same file. The JSON is rewritten after every row, so a run cut
short keeps what it measured."""

from __future__ import annotations

import copy
import json
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from benchmarks.results import child_env

__all__ = ["cell", "half_the_device_gb", "run_memory_bench", "summarize", "table", "train_once"]

KEPT = (
    "batch_size_chosen",
    "predicted_peak_mb",
    "peak_mem_mb",
    "memory_model",
    "memory_limit_mb",
    "train_samples_per_s",
    "lr_chosen",
    "mfu",
    "trial_s",
)


def half_the_device_gb() -> float:
    """Half of the CUDA device's total memory in GB (2^30 bytes), asked in a child process so this
    one holds no CUDA context of its own."""
    code = "import torch; print(torch.cuda.mem_get_info()[1])"
    total = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    return round(int(total) / 2 / 2**30, 1)


def _variant(base: dict, precision: str, checkpointing: bool, batch, limit_gb: float, steps: int) -> dict:
    config = copy.deepcopy(base)
    config["study"] = {**config["study"], "memory_limit_gb": limit_gb}
    config["workload"] = {**config["workload"], "max_steps": steps, "eval_every": steps}
    config["params"] = {**config["params"], "batch_size": batch}
    config["systems"] = {**config["systems"], "precision": precision, "grad_checkpointing": checkpointing}
    return config


def train_once(config: dict, work: Path, name: str) -> dict:
    """One `hpo train` of `config` in a fresh process: its verdict and the memory figures (KEPT)."""
    import yaml  # here, so that the GPU session's report (standard library only) can import `table`

    path = work / f"{name}.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    started = time.perf_counter()
    # No time limit of its own: the caller's (a gpu-session step's cap) ends it, and the rows before it are written.
    done = subprocess.run(
        [sys.executable, "-m", "hpo", "train", str(path), "--json"], capture_output=True, text=True, cwd=work, env=child_env()
    )
    wall = round(time.perf_counter() - started, 1)
    if not done.stdout.strip().startswith("{"):  # `hpo train` exits 1 on a verdict, and still prints its trial
        tail = (done.stderr.strip().splitlines() or ["no output"])[-1]
        return {"verdict": f"error: exit {done.returncode}: {tail[:300]}", "wall_s": wall}
    trial = json.loads(done.stdout)
    attrs = trial.get("user_attrs", {})
    row = {"verdict": trial.get("verdict"), "wall_s": wall} | {k: attrs.get(k) for k in KEPT}
    if row["predicted_peak_mb"] and row["peak_mem_mb"]:
        row["prediction_error"] = round(row["predicted_peak_mb"] / row["peak_mem_mb"] - 1, 3)
    return row


def run_memory_bench(
    base: dict,
    limit_gb: float,
    precisions: list[str],
    max_batch: int,
    multiple_of: int,
    steps: int,
    time_cap: float | None = None,
    on_row: Callable[[dict], None] | None = None,
) -> dict:
    """The rows (name -> row) in the order they ran, and what they show (`summarize`). No row
    starts past `time_cap` seconds; those are listed under `not_run`."""
    auto = {"auto": {"max": max_batch, "multiple_of": multiple_of}}
    plan = [(f"{p}, checkpointing {'on' if c else 'off'}, batch auto", p, c) for p in precisions for c in (True, False)]
    result: dict = {"limit_gb": limit_gb, "max_batch": max_batch, "steps": steps, "rows": {}, "not_run": []}
    started = time.perf_counter()

    def left() -> float | None:
        return None if time_cap is None else time_cap - (time.perf_counter() - started)

    with tempfile.TemporaryDirectory(prefix="hpo-memory-bench-") as tmp:
        for i, (name, precision, checkpointing) in enumerate(plan):
            if left() is not None and left() <= 0:
                result["not_run"].append(name)
                continue
            row = train_once(_variant(base, precision, checkpointing, auto, limit_gb, steps), Path(tmp), f"row{i}")
            result["rows"][name] = {"precision": precision, "grad_checkpointing": checkpointing, "batch_size": "auto"} | row
            result |= summarize(result["rows"])
            if on_row:
                on_row(result)
        chosen = result["rows"].get(plan[0][0], {}).get("batch_size_chosen")
        name = f"{precisions[0]}, checkpointing off, batch {chosen} (checkpointing's)"
        if chosen and (left() is None or left() > 0):
            row = train_once(_variant(base, precisions[0], False, chosen, limit_gb, steps), Path(tmp), "rejected")
            result["rows"][name] = {"precision": precisions[0], "grad_checkpointing": False, "batch_size": chosen} | row
            result |= summarize(result["rows"])
            if on_row:
                on_row(result)
        elif chosen:
            result["not_run"].append(name)
    return result


def summarize(rows: dict) -> dict:
    """The fastest auto row with checkpointing and without, and the first's throughput over the second's."""
    ok = [r for r in rows.values() if r["verdict"] == "ok" and r.get("train_samples_per_s") and r["batch_size"] == "auto"]
    best = {
        on: max((r for r in ok if r["grad_checkpointing"] is on), key=lambda r: r["train_samples_per_s"], default=None)
        for on in (True, False)
    }
    ratio = None
    if best[True] and best[False]:
        ratio = round(best[True]["train_samples_per_s"] / best[False]["train_samples_per_s"], 3)
    errors = [r["prediction_error"] for r in rows.values() if r.get("prediction_error") is not None]
    return {
        "best_with_checkpointing": best[True],
        "best_without_checkpointing": best[False],
        "throughput_with_over_without": ratio,
        "prediction_error_range": [min(errors), max(errors)] if errors else None,
    }


def cell(value, fmt: str = "{}") -> str:
    """A table cell: empty where nothing was measured."""
    return "" if value is None else fmt.format(value)


def table(result: dict) -> str:
    """A markdown table of the rows."""
    head = "| run | verdict | batch | predicted peak MB | measured peak MB | error | samples/s |\n|---|---|---|---|---|---|---|\n"

    lines = [
        f"| {name} | {r['verdict'][:70]} | {cell(r.get('batch_size_chosen') or r['batch_size'])} | "
        f"{cell(r.get('predicted_peak_mb'), '{:.0f}')} | {cell(r.get('peak_mem_mb'), '{:.0f}')} | "
        f"{cell(r.get('prediction_error'), '{:+.1%}')} | {cell(r.get('train_samples_per_s'), '{:.1f}')} |"
        for name, r in result["rows"].items()
    ]
    return head + "\n".join(lines) + "\n"
