"""Throughput (`train_samples_per_s`: samples trained over training time, waits for batches included;
the median step's `steady_samples_per_s` beside it) and data_wait_share of png_images per loader setting: hpo's searched settings and
the fixed guesses the projects hpo grew from used (issue 40). Each setting is one trial through
`hpo.trial.execute` (probe, loader check, training), its record read back.

On CUDA each searched setting runs with pin_memory false and true, side by side (pinned batches
are copied non-blocking), so a cut at the time cap still keeps whole pairs."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable

from hpo.config.resolve import build_config
from hpo.config.space import parse_space
from hpo.config.trial import Knobs, LoaderSettings
from hpo.trial import execute
from hpo.verify.stored import MemoryVerdicts

__all__ = ["FIXED_GUESSES", "SEARCHED", "run_loader_bench", "settings_for"]

KNOBS = Knobs(precision="fp32", attention="sdpa", optimizer="foreach")
BATCH = 32
# What `search_spaces/png_images.yaml` searches (pin_memory left out: it does nothing on a CPU).
SEARCHED = {
    f"num_workers={n}, persistent={p}": LoaderSettings(num_workers=n, persistent_workers=p)
    for n in (0, 1, 2)
    for p in (False, True)
    if n or not p
}
FIXED_GUESSES = {
    "guess A: 2 workers, pinned, persistent, prefetch 2": LoaderSettings(num_workers=2, pin_memory=True, persistent_workers=True, prefetch_factor=2),
    "guess B: num_workers = 2 if cuda else 0 (CPU: 0)": LoaderSettings(),
    "guess C: 4 workers, non-blocking copies": LoaderSettings(num_workers=4),
}  # fmt: skip


def settings_for(device: str) -> dict[str, LoaderSettings]:
    """The searched settings on `device` (on CUDA each with pin_memory false, then true), then the guesses."""
    if device != "cuda":
        return {**SEARCHED, **FIXED_GUESSES}
    pairs = {
        f"{name}, pin_memory={pin}": dataclasses.replace(settings, pin_memory=pin)
        for name, settings in SEARCHED.items()
        for pin in (False, True)
    }
    return {**pairs, **FIXED_GUESSES}


def _config(settings: LoaderSettings, steps: int, images: int, size: int, device: str):
    space = parse_space(
        {
            "study": {"name": "bench-loader", "pruner": {"name": "none"}, "skip_slow": False},
            "workload": {"name": "png_images", "max_steps": steps, "eval_every": steps, "images": images, "size": size, "crop": size * 3 // 4},
            "params": {"lr": 1e-3, "batch_size": BATCH},
            "systems": {"device": device},
        },
        source="bench-loader",
    )  # fmt: skip
    return build_config(space, {"lr": 1e-3, "batch_size": BATCH}, KNOBS, settings)


def summarize(rows: dict, searched: set[str], guesses: set[str]) -> dict:
    """hpo's pick among the searched rows that ran ok, and its speed-up over each guess (None before any ran)."""
    ok = {n: r for n, r in rows.items() if n in searched and r["verdict"] == "ok" and r["samples_per_s"]}
    if not ok:
        return {"picked": None, "speedup_over_guesses": {}}
    picked = max(ok, key=lambda n: ok[n]["samples_per_s"])
    speedups = {
        n: round(ok[picked]["samples_per_s"] / r["samples_per_s"], 2)
        for n, r in rows.items()
        if n in guesses and r["samples_per_s"]
    }
    return {"picked": picked, "speedup_over_guesses": speedups}


def _samples_over_train_s(attrs: dict) -> float | None:
    """The check on the recorded figure, from the record's counts: BATCH samples a step, every step
    run but the profiled one, over the recorded training time."""
    steps, train_s = attrs.get("steps_run"), attrs.get("train_s")
    return BATCH * (steps - 1) / train_s if steps and train_s else None


def run_loader_bench(
    steps: int = 40,
    images: int = 512,
    size: int = 96,
    device: str = "cpu",
    time_cap_s: float | None = None,
    on_row: Callable[[dict], None] | None = None,
) -> dict:
    """Every setting of `settings_for(device)`, one trial each; none starts past `time_cap_s`.
    `on_row` gets the result so far after each row, so a caller can write it before the next."""
    settings = settings_for(device)
    guesses = set(FIXED_GUESSES)
    rows: dict = {}
    start = time.monotonic()

    def so_far() -> dict:
        result = {"steps": steps, "images": images, "size": size, "device": device, "rows": rows}
        result["not_run"] = [n for n in settings if n not in rows]
        return result | summarize(rows, set(settings) - guesses, guesses)

    for name, loader in settings.items():
        if time_cap_s is not None and time.monotonic() - start > time_cap_s:
            break
        outcome = execute(_config(loader, steps, images, size, device), MemoryVerdicts())
        a = outcome.attrs
        rows[name] = {
            "settings": loader.as_dict(),
            "verdict": str(outcome.verdict),
            "samples_per_s": a.get("train_samples_per_s"),
            "steady_samples_per_s": a.get("steady_samples_per_s"),
            "samples_over_train_s": _samples_over_train_s(a),
            "train_s": a.get("train_s"),
            "data_wait_share": a.get("data_wait_share"),
            "loader_observed": a.get("loader_observed"),
        }
        if on_row is not None:
            on_row(so_far())
    return so_far()
