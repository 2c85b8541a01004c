"""How far the peak model's prediction is from the measured peak, on every model of the zoo (hpo's
built-in workloads among them) (issue 39): `scripts/bench-memory-prediction`.

Each row is one `hpo train` in its own process with a memory limit no model reaches (so every trial
is predicted, none rejected) at a fixed batch, per variant (fp32 without checkpointing, bf16 with
it). The peak model is fitted from 1 sample up, doubling to a quarter of the batch
(`hpo.verify.peaks._peak_fit`), and predicts the whole batch, so the error is an extrapolation over 4x, as
in a study. On a CPU the figures are resident sets: the
process's own memory (torch, the libraries, the data) is in both, and the error over what the step
adds (`step_error`) says more than the error over the whole peak."""

from __future__ import annotations

import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from benchmarks.memory_budget import cell, train_once

__all__ = ["VARIANTS", "run_prediction_table", "table"]

VARIANTS = {"fp32": ("fp32", False), "bf16 + checkpointing": ("bf16", True)}


def _config(
    workload: str, options: dict, precision: str, checkpointing: bool, batch: int, steps: int, limit_gb: float, device: str
) -> dict:
    return {
        "format": 2,
        "study": {"objectives": ["val_loss"], "directions": ["minimize"], "seed": 0, "skip_slow": False, "memory_limit_gb": limit_gb},
        "workload": {"name": workload, "max_steps": steps, "eval_every": steps, **options},
        "params": {"lr": 1e-3, "batch_size": batch},
        "systems": {"precision": precision, "grad_checkpointing": checkpointing, "compile": False, "device": device},
    }  # fmt: skip


def _errors(row: dict) -> dict:
    """The prediction's error over the whole peak and over what the step adds to the fitted fixed part."""
    model, predicted, measured = row.get("memory_model") or {}, row.get("predicted_peak_mb"), row.get("peak_mem_mb")
    if not (predicted and measured):
        return {}
    out = {"error": round(predicted / measured - 1, 4)}
    fixed = model.get("fixed_mb")
    if fixed is not None and measured - fixed > 0:
        out["step_mb"] = round(measured - fixed, 1)
        out["step_error"] = round((predicted - fixed) / (measured - fixed) - 1, 4)
    return out


def run_prediction_table(
    models: dict[str, tuple[str, dict]],
    batch: int,
    steps: int,
    limit_gb: float,
    device: str = "cpu",
    time_cap: float | None = None,
    on_row: Callable[[dict], None] | None = None,
    variants: list[str] | None = None,
) -> dict:
    """models: name -> (workload, options). One row per model and `variants` entry (default: every
    VARIANTS entry); none starts past `time_cap` s."""
    result: dict = {"batch": batch, "steps": steps, "limit_gb": limit_gb, "device": device, "rows": [], "not_run": []}
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="hpo-memory-prediction-") as tmp:
        for name, (workload, options) in models.items():
            for variant in variants or list(VARIANTS):
                precision, checkpointing = VARIANTS[variant]
                if time_cap is not None and time.perf_counter() - started > time_cap:
                    result["not_run"].append(f"{name}, {variant}")
                    continue
                config = _config(workload, options, precision, checkpointing, batch, steps, limit_gb, device)
                row = {"model": name, "variant": variant} | train_once(config, Path(tmp), f"{name}-{precision}")
                row |= _errors(row)
                result["rows"].append(row)
                if on_row:
                    on_row(result)
    errors = [abs(r["error"]) for r in result["rows"] if "error" in r]
    step_errors = [abs(r["step_error"]) for r in result["rows"] if "step_error" in r]
    result["largest_error"] = max(errors, default=None)
    result["largest_step_error"] = max(step_errors, default=None)
    return result


def table(result: dict) -> str:
    lines = [
        "| model | variant | verdict | predicted MB | measured MB | error | step MB | step error |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in result["rows"]:
        lines.append(
            f"| {r['model']} | {r['variant']} | {r['verdict'][:60]} | {cell(r.get('predicted_peak_mb'), '{:.0f}')} | "
            f"{cell(r.get('peak_mem_mb'), '{:.0f}')} | {cell(r.get('error'), '{:+.1%}')} | {cell(r.get('step_mb'), '{:.0f}')} | "
            f"{cell(r.get('step_error'), '{:+.1%}')} |"
        )
    return "\n".join(lines) + "\n"
