"""The tables `scripts/bench-scale` prints from its report (benchmarks.scale and scale_growth)."""

from __future__ import annotations

__all__ = ["table"]


def _workers(rows: list[dict]) -> list[str]:
    lines = [
        "\n1. Workers: hpo's worker loop and objective, a tiny causal LM trained for 2 steps",
        f"{'workers':>8} {'trials':>7} {'wall s':>7} {'trials/s':>9} {'trial ms':>9} {'p95 ms':>7} {'db ms':>7} {'server cpu ms':>14}",
    ]
    for r in rows:
        lines.append(
            f"{r['workers']:>8} {r['trials']:>7} {r['wall_s']:>7} {r['trials_per_s']:>9} {r['trial_ms_median']:>9} "
            f"{r['trial_ms_p95']:>7} {r['db_ms_median']:>7} {r['server_cpu_ms_per_trial']:>14}"
        )
    lines.append(
        "   trial ms: medians of the trials' own durations (sampling, probe, training, writes), wall clock, so with more\n"
        "   workers than cores they include waiting for a core; db = inside the database driver (all threads), per trial;\n"
        "   server cpu = the local database server's CPU time per trial (its other clients count too)"
    )
    return lines


def _growth(rows: list[dict]) -> list[str]:
    lines = [
        "\n2. Sampler latency as the study grows (filled with completed trials, then asked; hpo's TPE)",
        f"{'trials':>8} {'ask ms':>8} {'ask max':>8} {'db ms/trial':>12}   (one process; db: ask + tell)",
    ]
    return lines + [f"{r['size']:>8} {r['ask_ms_median']:>8} {r['ask_ms_max']:>8} {r['db_ms_median']:>12}" for r in rows]


def _isolation(iso: dict) -> list[str]:
    lines = [
        "\n3. Isolation: a tiny causal LM, 2 steps, 1 thread; medians from the trials' own timestamps",
        f"{'mode':>16} {'trials':>7} {'gap ms':>8} {'trial ms':>9} {'per trial ms':>13} {'first trial ms':>15} {'wall s':>7}",
    ]
    for mode in ("in_process", "child_per_trial"):
        r = iso[mode]
        lines.append(
            f"{mode:>16} {r['trials']:>7} {r['gap_between_trials_ms']:>8} {r['trial_duration_ms']:>9} "
            f"{r['per_trial_ms']:>13} {r['first_trial_ms']:>15} {r['wall_s']:>7}"
        )
    lines.append(f"   isolation costs {iso['overhead_per_trial_ms']} ms per trial (child minus in-process, after the first)")
    return lines


def table(report: dict) -> str:
    lines = [f"\nhpo scale benchmark, {report['date']}, {report['cpus']} CPUs, storage {report['storage']}"]
    if report["workers"]:
        lines += _workers(report["workers"])
    if report["growth"]:
        lines += _growth(report["growth"])
    if report.get("isolation"):
        lines += _isolation(report["isolation"])
    return "\n".join(lines)
