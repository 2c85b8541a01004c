"""Every figure the docs quote between `<!-- figure: NAME -->` markers, declared once with the result
file under benchmarks/results/ it is read from (`benchmarks/figures.py` reads and checks them): the
GPU runs' in `figures_gpu.py`, the CPU benchmarks' here."""

from __future__ import annotations

from benchmarks.figures import Figure
from benchmarks.figures_gpu import GPU_FIGURES
from benchmarks.figures_helpers import from_file, key, table

__all__ = ["FIGURES"]

FIRST = "2026-11-26"
PARALLEL_DATE = "2026-12-06"


def _cpu_vs_bare() -> list[Figure]:
    """docs/benchmarks/vs-bare.md's CPU tables, one set per result file."""
    files = {
        "avx2.tiny": "vs-bare-tiny-cpu-avx2.json",
        "avx2.mid": "vs-bare-mid-cpu-avx2.json",
        "avx512bf16.tiny": "vs-bare-tiny-cpu-avx512bf16.json",
        "avx512bf16.mid": "vs-bare-mid-cpu-avx512bf16.json",
    }
    columns = {
        "throughput": ("throughput_ratio", "{:.2f}x"),
        "per_round": ("throughput_ratio_per_round", "{:.2f}"),
        "cpu_time": ("cpu_time_ratio", "{:.2f}x"),
        "peak_mem": ("peak_mem_ratio", "{:.3f}x"),
        "hpo_peak_mb": ("hpo_peak_mem_mb", "{:.1f}"),
        "bare_peak_mb": ("bare_peak_mem_mb", "{:.1f}"),
        "above_base": ("mem_above_base_ratio", "{:.2f}x"),
        "hpo_above_mb": ("hpo_mem_above_base_mb", "{:.0f}"),
        "bare_above_mb": ("bare_mem_above_base_mb", "{:.0f}"),
        "probe_share": ("probe_share", "{:.1%}"),
    }
    return [
        figure
        for key, file in files.items()
        for figure in from_file(
            file, FIRST, {f"vs_bare.{key}.{c}": (f"summary.{field}", fmt) for c, (field, fmt) in columns.items()}
        )
    ]


def _cpu_knobs() -> list[Figure]:
    """docs/benchmarks/knobs.md: each knob on the AVX2 host, time to target on the avx512_bf16 host,
    and the probe's overhead on both."""
    avx2 = {"sps": ("samples_per_s", "{:.1f}"), "sps_x": ("samples_per_s_ratio", "{:.2f}"), "step": ("step_ms", "{:.1f}")}
    avx2 |= {"step_x": ("step_ms_ratio", "{:.2f}"), "mem": ("peak_mem_mb", "{:.1f}"), "mem_x": ("peak_mem_mb_ratio", "{:.2f}")}
    avx2 |= {"slowdown": ("probe_slowdown", "{:.2f}")}
    target = {"s": ("time_to_target_s", "{:.1f}"), "x": ("speedup_vs_baseline", "{:.2f}"), "steps": ("steps_run", "{}")}
    target |= {"sps": ("train_samples_per_s", "{:.1f}"), "mfu": ("mfu", "{:.1%}")}
    configs = ("baseline", "sdpa", "fused", "foreach", "ckpt", "compile", "bf16", "fp16", "bf16+fused", "bf16+sdpa+fused")
    slow = {"bf16", "fp16", "bf16+fused"}  # refused as slow on the AVX2 host: only the slowdown was measured
    bf16_host = "knobs-causal_lm-cpu-avx512bf16.json"
    return [
        *from_file("knobs-causal_lm-cpu-avx2.json", "2026-11-22", {
            f"knobs.avx2.{key(c)}.{col}": (f"rows[config={c}].{field}", fmt)
            for c in configs[:-1] for col, (field, fmt) in avx2.items() if c not in slow
        } | {f"knobs.avx2.{key(c)}.slowdown": (f"rows[config={c}].probe_slowdown", "{:.1f}") for c in configs if c in slow} | {"knobs.avx2.overhead.probe_fraction": ("overhead.probe_fraction", "{:.1%}")}),
        *from_file(bf16_host, "2026-11-23", {
            f"knobs.avx512bf16.target.{key(c)}.{col}": (f"time_to_target.rows[config={c}].{field}", fmt)
            for c in configs if c != "fp16" for col, (field, fmt) in target.items()
        } | {
            "knobs.avx512bf16.overhead.probe_s": ("overhead.probe_s", "{:.2f}"),
            "knobs.avx512bf16.overhead.trial_s": ("overhead.probed_trial_s", "{:.2f}"),
            "knobs.avx512bf16.overhead.fraction": ("overhead.probe_fraction", "{:.1%}"),
            "knobs.avx512bf16.overhead.later_probe_s": ("overhead.later_probe_s", "{:.2f}"),
            "knobs.avx512bf16.overhead.later_trial_s": ("overhead.later_trial_s", "{:.2f}"),
            "knobs.avx512bf16.overhead.later_fraction": ("overhead.later_probe_fraction", "{:.2%}"),
        }),
        *from_file("knobs-overhead-causal_lm-cpu-avx2.json", "2026-11-26", {
            "knobs.avx2_1thread.probe_s": ("overhead.probe_s", "{:.2f}"),
            "knobs.avx2_1thread.trial_s": ("overhead.probed_trial_s", "{:.1f}"),
            "knobs.avx2_1thread.fraction": ("overhead.probe_fraction", "{:.1%}"),
            "knobs.avx2_1thread.later_probe_s": ("overhead.later_probe_s", "{:.2f}"),
            "knobs.avx2_1thread.later_trial_s": ("overhead.later_trial_s", "{:.1f}"),
            "knobs.avx2_1thread.later_fraction": ("overhead.later_probe_fraction", "{:.2%}"),
        }),
    ]  # fmt: skip


def _cpu_small() -> list[Figure]:
    """avoidance.md, hf-data.md and notes-cost.md ("now"; "before" is only in git history)."""
    samplers = ("tpe", "gp", "random", "cmaes", "nsga2")
    avoid = {
        f"avoidance.{sampler}.{'wrapped' if wrapped else 'plain'}": (
            f"runs[sampler={sampler}][wrapped={wrapped}].known_bad_proposals",
            "{}",
        )
        for sampler in samplers
        for wrapped in (False, True)
    }
    data = {
        f"hf_data.{scale}.{w}.{col}": (f"rows[workload=hf_{w}].{col}_s", "{:.2f}")
        for scale in ("x1", "x20")
        for w in ("text_classification", "causal_lm")
        for col in ("cold", "warm")
    }
    return [
        *from_file("avoidance-cpu-avx2.json", "2026-11-25", avoid),
        *from_file("hf-data-cpu-avx512bf16.json", "2026-11-25", {k: v for k, v in data.items() if ".x1." in k}),
        *from_file("hf-data-x20-cpu-avx512bf16.json", "2026-11-25", {k: v for k, v in data.items() if ".x20." in k}),
        *from_file("notes-cost-cpu-avx512bf16.json", "2026-11-23", {
            "notes_cost.trial_note_ms": ("notes.trial_note_ms_median", "{:.2f}"),
            "notes_cost.study_note_ms": ("notes.study_note_ms_at_final_size", "{:.1f}"),
            "notes_cost.study_note_updates": ("notes.study_note_updates", "{}"),
            "notes_cost.per_trial_ms": ("notes.notes_ms_per_trial", "{:.1f}"),
            "notes_cost.share": ("notes_share_of_trial", "{:.1%}"),
            "notes_cost.trials_per_s": ("study.trials_per_s", "{:.2f}"),
        }),
        Figure(name="notes_cost.trial_s", file="notes-cost-cpu-avx512bf16.json", path="study.trial_ms_median",
               format="{:.2f}", scale=1e-3, date="2026-11-23"),
    ]  # fmt: skip


def _scale() -> list[Figure]:
    """scale.md (workers, sampler latency, isolation) and scale-reload.md."""
    workers = {"trials": "{}", "trials_per_s": "{:.2f}", "trial_ms_median": "{:,.0f}", "db_ms_median": "{:,.0f}"}
    workers |= {"sampler_ms_median": "{:,.0f}", "server_cpu_ms_per_trial": "{:.1f}"}
    growth = {"ask_ms_median": "{:,.0f}", "ask_ms_max": "{:,.0f}", "db_ms_median": "{:,.0f}"}
    reload = {f"{side}_{what}": "{:.0f}" for side in ("before", "after") for what in ("trial_process_ms", "db_ms")}
    reload |= {"before_trials_read": "{}", "after_worker_ask_ms": "{:.0f}", "after_trials_read": "{}"}
    return [
        *from_file("scale-cpu-avx2.json", "2026-11-22", {
            **table("scale.workers", "workers", "workers", (16, 64), workers),
            **table("scale.growth", "growth", "size", (100, 1000, 2500, 5000, 10000), growth),
            "scale.isolation.overhead_ms": ("isolation.overhead_per_trial_ms", "{:+.0f}"),
        }),
        *from_file("scale-reload-cpu-avx2.json", "2026-11-25", table("scale_reload", "rows", "size", (0, 1000, 5000, 10000), reload)),
    ]  # fmt: skip


CONN = {"trials": "{:.0f}", "budget": "{:.0f}", "wall_s": "{:.1f}", "trials_per_s": "{:.1f}", "db_ms_per_trial": "{:.0f}"}
CONN |= {"peak_connections": "{:.0f}", "median_connections": "{:.0f}", "errors": "{:.0f}"}  # a text row reads floats


def _scale_conn() -> list[Figure]:
    """scale-conn.md: each (workers, via) row, from the JSON files and the first command's text output."""

    def rows(runs: tuple, source) -> dict[str, tuple[str, str]]:
        return {
            f"scale_conn.{tag}.{w}.{via}.{field}": (source(w, via, field), fmt)
            for tag, w, via in runs
            for field, fmt in CONN.items()
        }

    def json_row(w, via, field):
        return f"rows[workers={w}][via={via}].{field}"

    def text_row(w, via, field):
        return rf"re:workers={w} \| via={via} \|.*? {field}=([\d.]+)"

    shared = (
        ("max100", 100, "postgres"),
        ("max100", 100, "pgbouncer"),
        ("max100", 200, "postgres"),
        ("max100", 200, "pgbouncer"),
    )
    return [
        *from_file("scale-conn-cpu-avx512bf16.json", "2026-11-25", rows(shared, json_row)),
        *from_file("scale-conn-max50-cpu-avx2.json", "2026-11-25", rows((("max50", 100, "pgbouncer"), ("max50", 200, "pgbouncer")), json_row)),
        *from_file("scale-conn-max50-default-wait-cpu-avx2.txt", "2026-11-25", rows((("max50_wait120", 100, "postgres"), ("max50_wait120", 100, "pgbouncer")), text_row)),
    ]  # fmt: skip


SPREAD = "{median:.2f} ({min:.2f}–{max:.2f})"  # a summary's median and range


def _vs_hf() -> list[Figure]:
    """vs-hf.md: each search's wall clock both ways and hpo / HF per pair, for the newest result of
    each search on each host, and the detail of the MiniLM short search on the avx512_bf16 host."""
    dates = {"cpu-avx2": "2026-11-25", "cpu-avx512bf16": "2026-11-23"}
    figures = []
    for host, date in dates.items():
        for task in ("text_classification", "causal_lm"):
            for length in ("short", "default"):
                file, tag = f"vs-hf-{task}-{length}-{host}.json", f"vs_hf.{host}.{task}.{length}"
                one = length == "default" and task == "text_classification"  # one pair: no range
                figures += from_file(
                    file,
                    date,
                    {
                        f"{tag}.hf": ("summary.hf.wall_s", "{median:.2f}" if one else SPREAD),
                        f"{tag}.hpo": ("summary.hpo.wall_s", "{median:.2f}" if one else SPREAD),
                        f"{tag}.hf_runs": ("runs[side=hf].wall_s", "{}"),
                    },
                )
                figures.append(
                    Figure(
                        name=f"{tag}.pairs",
                        file=file,
                        path="runs[side=hpo].wall_s",
                        format="{:.2f}",
                        date=date,
                        over=f"{tag}.hf_runs",
                    )
                )
    detail = ("wall_s", "startup_s", "first_trial_s", "later_trials_s", "between_trials_s", "after_last_s")
    detail += ("samples_per_s", "outside_steps_s", "eval_s")
    minilm = {
        f"vs_hf.detail.{side}.{field}": (
            f"summary.{side}.{field}",
            "{median:.1f} ({min:.1f}–{max:.1f})" if field == "samples_per_s" else SPREAD,
        )
        for side in ("hf", "hpo")
        for field in detail
    }
    minilm["vs_hf.detail.hf.between_trials_s"] = ("summary.hf.between_trials_s", "{median:.2f}")  # no gap to range over
    return figures + from_file("vs-hf-text_classification-short-cpu-avx512bf16.json", "2026-11-23", minilm)


SWEEP = {"wall_s": "{:.1f}", "to_first_trial_s": "{:.1f}", "sweep_s": "{:.2f}", "sweep_share": "{:.1%}"}
SWEEP |= {"over_joint_s": "{:.1f}", "wall_over_joint": "{:.3f}", "best": "{:.4f}"}
SWEEP_FILES = {  # the tables of time-to-quality.md whose file benchmarks/results/ still holds: (file, K)
    "avx2": ("sweep-share-quickstart-cpu-avx2.json", 4),
    "avx512bf16.run1": ("sweep-share-quickstart-cpu-avx512bf16-run1.json", 5),
    "avx512bf16.run2": ("sweep-share-quickstart-cpu-avx512bf16.json", 6),
    "avx2_idle.run1": ("sweep-share-quickstart-cpu-avx2-idle-run1.json", 5),
    "avx2_idle.run2": ("sweep-share-quickstart-cpu-avx2-idle-run2.json", 5),
    "causal_lm": ("sweep-share-causal_lm-cpu-avx2.json", 5),
}


def _sweep_share() -> list[Figure]:
    """time-to-quality.md's sweep-share tables (2026-11-29; the files record no date): each study's
    row, its K-th trained trial over joint's time with K as the file names it."""
    figures = []
    for tag, (file, k) in SWEEP_FILES.items():
        columns = SWEEP | {f"to_{k}_trained_over_joint": "{:.3f}"}
        for study in ("first", "repeated", "joint"):
            fields = columns if study != "joint" else {f: columns[f] for f in ("wall_s", "to_first_trial_s", "best")}
            figures += from_file(file, "2026-11-29", {
                f"sweep_share.{tag}.{study}.{field.replace(f'_{k}_', '_k_')}": (f"runs[study={study}].{field}", fmt)
                for field, fmt in fields.items()
            })  # fmt: skip
    return figures


PARALLEL_ROWS = {
    "one_rank": "1 rank",
    "ddp_25": "DDP, 2 ranks, bucket_cap_mb 25",
    "ddp_1": "DDP, 2 ranks, bucket_cap_mb 1",
    "fsdp_reshard": "FSDP2, 2 ranks, reshard_after_forward true",
    "fsdp_keep": "FSDP2, 2 ranks, reshard_after_forward false",
}
PARALLEL_COLUMNS = {
    "samples_per_s": "{:.2f}",
    "speedup_over_1_rank": "{:.2f}x",
    "collective_share": "{:.0%}",
    "mfu": "{:.1%}",
    "load_median": "{:.1f}",
}


def _parallel() -> list[Figure]:
    """docs/benchmarks/parallel.md: each row's medians over its rounds."""
    places = {
        f"parallel.{key}.{field}": (f"rows[row={row}].{field}", fmt)
        for key, row in PARALLEL_ROWS.items()
        for field, fmt in PARALLEL_COLUMNS.items()
    }
    return from_file("parallel-cpu-amx.json", PARALLEL_DATE, places)


FIGURES: list[Figure] = [
    *GPU_FIGURES,
    *_cpu_vs_bare(),
    *_cpu_knobs(),
    *_cpu_small(),
    *_scale(),
    *_scale_conn(),
    *_vs_hf(),
    *_sweep_share(),
    *_parallel(),
]
