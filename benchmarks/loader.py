"""Throughput and data_wait_share of png_images per loader setting: hpo's searched settings and
the fixed guesses the projects hpo grew from used (issue 40). Each setting is one trial through
`hpo.trial.executor.execute` (probe, loader check, training), its record read back."""

from __future__ import annotations

from hpo.config.resolve import build_config
from hpo.config.space import parse_space
from hpo.config.trial import Knobs, LoaderSettings
from hpo.trial.executor import execute
from hpo.verify.cache import MemoryVerdicts

__all__ = ["FIXED_GUESSES", "SEARCHED", "run_loader_bench"]

KNOBS = Knobs(precision="fp32", attention="sdpa", optimizer="foreach")
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


def _config(settings: LoaderSettings, steps: int, images: int, size: int):
    space = parse_space(
        {
            "study": {"name": "bench-loader", "pruner": {"name": "none"}, "skip_slow": False},
            "workload": {"name": "png_images", "max_steps": steps, "eval_every": steps, "images": images, "size": size, "crop": size * 3 // 4},
            "params": {"lr": 1e-3, "batch_size": 32},
            "systems": {"device": "cpu"},
        },
        source="bench-loader",
    )  # fmt: skip
    return build_config(space, {"lr": 1e-3, "batch_size": 32}, KNOBS, settings)


def run_loader_bench(steps: int = 40, images: int = 512, size: int = 96) -> dict:
    rows = {}
    for name, settings in {**SEARCHED, **FIXED_GUESSES}.items():
        outcome = execute(_config(settings, steps, images, size), MemoryVerdicts())
        a = outcome.attrs
        rows[name] = {
            "settings": settings.as_dict(),
            "verdict": str(outcome.verdict),
            "samples_per_s": a.get("train_samples_per_s"),
            "data_wait_share": a.get("data_wait_share"),
            "loader_observed": a.get("loader_observed"),
        }
    ok = {n: r for n, r in rows.items() if n in SEARCHED and r["verdict"] == "ok"}
    picked = max(ok, key=lambda n: ok[n]["samples_per_s"])
    speedups = {
        n: round(ok[picked]["samples_per_s"] / r["samples_per_s"], 2)
        for n, r in rows.items()
        if n in FIXED_GUESSES and r["samples_per_s"]
    }
    return {"steps": steps, "images": images, "size": size, "rows": rows, "picked": picked, "speedup_over_guesses": speedups}
