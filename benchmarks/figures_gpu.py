"""The GPU figures the docs quote: the two H200 runs (2026-11-26 by hand, 2026-11-28 through
scripts/gpu-session), declared once with their files under benchmarks/results/."""

from __future__ import annotations

from benchmarks.figures import Figure
from benchmarks.figures_helpers import from_file

__all__ = ["GPU_FIGURES"]

H200_1 = "gpu-2026-11-26-cuda-nvidia-h200/"  # the first GPU run, by hand: raw files, see its README.md
FIRST, SECOND = "2026-11-26", "2026-11-28"


def _second_run() -> list[Figure]:
    """The second H200 run (scripts/gpu-session): hpo against the hand-written loop, big.yaml
    compiled, each knob, and probe_first's opening sweep."""
    knob = "rows[config={}].{}"
    return [
        *from_file("vs-bare-big-cuda-nvidia-h200.json", SECOND, {
            "h200_2.vs_bare.throughput": ("summary.throughput_ratio", "{:.3f}x"),
            "h200_2.vs_bare.per_round": ("summary.throughput_ratio_per_round", "{:.3f}"),
            "h200_2.vs_bare.hpo_sps": ("summary.hpo_samples_per_s", "{:.1f}"),
            "h200_2.vs_bare.bare_sps": ("summary.bare_samples_per_s", "{:.1f}"),
            "h200_2.vs_bare.peak_mem": ("summary.peak_mem_ratio", "{:.3f}x"),
            "h200_2.vs_bare.hpo_peak_mb": ("summary.hpo_peak_mem_mb", "{:.0f}"),
            "h200_2.vs_bare.bare_peak_mb": ("summary.bare_peak_mem_mb", "{:.0f}"),
            "h200_2.vs_bare.hpo_mfu": ("summary.hpo_mfu", "{:.1%}"),
            "h200_2.vs_bare.bare_mfu": ("summary.bare_mfu", "{:.1%}"),
            "h200_2.vs_bare.probe_share": ("summary.probe_share", "{:.1%}"),
            "h200_2.vs_bare.loss_diff": ("summary.last_loss_max_rel_diff", "{:.1%}"),
        }),
        *from_file("compiled-big-cuda-nvidia-h200.json", SECOND, {
            "h200_2.bigc.sps": ("trial.user_attrs.train_samples_per_s", "{:.1f}"),
            "h200_2.bigc.mfu": ("trial.user_attrs.mfu", "{:.1%}"),
            "h200_2.bigc.peak_mb": ("trial.user_attrs.peak_mem_mb", "{:.0f}"),
            "h200_2.bigc.probe_s": ("trial.user_attrs.probe_s", "{:.1f}"),
            "h200_2.bigc.trial_s": ("trial.user_attrs.trial_s", "{:.1f}"),
        }),
        *from_file("knobs-causal_lm-cuda-nvidia-h200.json", SECOND, {
            "h200_2.knobs.sdpa": (knob.format("sdpa", "samples_per_s_ratio"), "{:.2f}x"),
            "h200_2.knobs.fused": (knob.format("fused", "samples_per_s_ratio"), "{:.2f}x"),
            "h200_2.knobs.bf16": (knob.format("bf16", "samples_per_s_ratio"), "{:.2f}x"),
            "h200_2.knobs.bf16_sdpa_fused": (knob.format("bf16+sdpa+fused", "samples_per_s_ratio"), "{:.2f}x"),
            "h200_2.knobs.bf16_sdpa_fused.mem": (knob.format("bf16+sdpa+fused", "peak_mem_mb_ratio"), "{:.2f}x"),
            "h200_2.knobs.probe_first": ("overhead.probe_fraction", "{:.1%}"),
            "h200_2.knobs.probe_later": ("overhead.later_probe_fraction", "{:.1%}"),
        }),
        *from_file("gpu-session-cuda-nvidia-h200.json", SECOND, {
            "h200_2.probe_first.sweep_s": ("probe_first.sweep_share.sweep_s", "{:.1f}"),
            "h200_2.probe_first.study_s": ("probe_first.sweep_share.study_s", "{:.1f}"),
            "h200_2.probe_first.share": ("probe_first.sweep_share.share", "{:.1%}"),
        }),
    ]  # fmt: skip


def _second_run_memory() -> list[Figure]:
    """The memory budget on big.yaml: the best batch with and without checkpointing."""
    rows = {"ckpt": "best_with_checkpointing", "no_ckpt": "best_without_checkpointing"}
    columns = {
        "batch": ("batch_size_chosen", "{:.0f}"),
        "predicted_mb": ("predicted_peak_mb", "{:.0f}"),
        "peak_mb": ("peak_mem_mb", "{:.0f}"),
        "error": ("prediction_error", "{:+.1%}"),
        "sps": ("train_samples_per_s", "{:.1f}"),
    }
    places = {
        f"h200_2.memory.{row}.{column}": (f"{key}.{field}", fmt)
        for row, key in rows.items()
        for column, (field, fmt) in columns.items()
    }
    return from_file("memory-budget-cuda-nvidia-h200.json", SECOND, places | {"h200_2.memory.limit_gb": ("limit_gb", "{:.1f}")})


def _first_run_knobs() -> list[Figure]:
    """The first run's knob table (`knobs.txt`): samples/s, its ratio, peak MB and its ratio per row."""
    rows = {"baseline": "baseline", "sdpa": "sdpa", "fused": "fused", "bf16": "bf16", "fp16": "fp16", "ckpt": "ckpt"}
    rows |= {"bf16_fused": r"bf16\+fused", "bf16_sdpa_fused": r"bf16\+sdpa\+fused", "fp16_fused": r"fp16\+fused"}
    columns = {"sps": (0, "{:.1f}"), "sps_x": (1, "{:.2f}"), "mem": (4, "{:.1f}"), "mem_x": (5, "{:.2f}")}
    places = {
        f"h200_1.knobs.{row}.{column}": (rf"re:(?m)^{pattern}\s+(?:[\d.]+\s+){{{skip}}}([\d.]+)", fmt)
        for row, pattern in rows.items()
        for column, (skip, fmt) in columns.items()
    }
    for name, label in (("first", "probe"), ("later", "later probe")):  # its verification overhead lines
        line = rf"re:(?m)^  {label}\s+"
        places[f"h200_1.knobs.overhead.{name}.probe_s"] = (line + r"([\d.]+) s of a", "{:.2f}")
        places[f"h200_1.knobs.overhead.{name}.trial_s"] = (line + r"[\d.]+ s of a ([\d.]+) s trial", "{:.2f}")
        places[f"h200_1.knobs.overhead.{name}.percent"] = (line + r"[\d.]+ s of a [\d.]+ s trial = ([\d.]+)%", "{:.0f}%")
    syncs = {"h200_1.syncs": (r"re:(?m)^\s+(\d+) hpo/engine/_?assembly\.py", "{:.0f}")}
    return from_file(H200_1 + "knobs.txt", FIRST, places) + from_file(H200_1 + "sync-debug-summary.txt", FIRST, syncs)


def _first_run_big() -> list[Figure]:
    """The first run's 152.7M GPT through `hpo train` (eager, compiled) and the hand-written loop."""
    big, bigc, bare = H200_1 + "big.json", H200_1 + "bigc.json", H200_1 + "bare.txt"
    bare_sps, bare_mb = r"re:bare workload batches: ([\d.]+) samples/s", r"re:bare workload batches: .*peak mem ([\d.]+) MB"
    gb = {"format": "{:.1f}", "scale": 1e-3, "date": FIRST}
    return [
        *from_file(big, FIRST, {
            "h200_1.big.sps": ("user_attrs.train_samples_per_s", "{:.0f}"),
            "h200_1.big.mfu": ("user_attrs.mfu", "{:.1%}"),
            "h200_1.big.probe_s": ("user_attrs.probe_s", "{:.1f}"),
            "h200_1.big.train_s": ("user_attrs.train_s", "{:.1f}"),
        }),
        *from_file(bigc, FIRST, {
            "h200_1.bigc.sps": ("user_attrs.train_samples_per_s", "{:.0f}"),
            "h200_1.bigc.mfu": ("user_attrs.mfu", "{:.1%}"),
            "h200_1.bigc.probe_s": ("user_attrs.probe_s", "{:.1f}"),
        }),
        *from_file(bare, FIRST, {"h200_1.bare.sps": (bare_sps, "{:.0f}"), "h200_1.bare.peak_mb": (bare_mb, "{:.0f}")}),
        Figure(name="h200_1.big.peak_gb", file=big, path="user_attrs.peak_mem_mb", **gb),
        Figure(name="h200_1.bigc.peak_gb", file=bigc, path="user_attrs.peak_mem_mb", **gb),
        Figure(name="h200_1.bare.peak_gb", file=bare, path=bare_mb, **gb),
        Figure(name="h200_1.vs_bare.throughput", file=big, path="user_attrs.train_samples_per_s", format="{:.2f}x", date=FIRST, over="h200_1.bare.sps"),
        Figure(name="h200_1.vs_bare.peak_mem", file=big, path="user_attrs.peak_mem_mb", format="{:.2f}x", date=FIRST, over="h200_1.bare.peak_mb"),
    ]  # fmt: skip


GPU_FIGURES: list[Figure] = [*_second_run(), *_second_run_memory(), *_first_run_knobs(), *_first_run_big()]
