"""The table `scripts/bench-vs-bare` prints: every run, then the ratios against their goals."""

from __future__ import annotations

__all__ = ["table"]


def _num(value, fmt: str = ".1f") -> str:
    return "–" if value is None else format(value, fmt)


def _goal(value, goal: float, at_least: bool, unit: str = "x", scale: float = 1.0) -> str:
    if value is None:
        return "not measured"
    met = value >= goal if at_least else value <= goal
    return f"goal {'>=' if at_least else '<='} {scale * goal:g}{unit}: {'met' if met else 'not met'}"


def table(result: dict) -> str:
    meta, summary = result["meta"], result["summary"]
    knobs = meta["knobs"]
    lines = [
        f"{meta['workload']} {meta['workload_options']} on {meta['device_model']}, "
        f"{knobs['precision']}/{knobs['attention']}/{knobs['optimizer']}"
        + (f"/compile {knobs['compile']}" if knobs["compile"] else "")
        + f", batch {meta['batch_size']}, {meta['steps']} steps timed from draw {meta['warmup']}, "
        f"{meta['repeats']} interleaved rounds",
        f"peak mem = {meta['peak_mem_means']}",
        "round side  samples/s  peak MB  above base MB  probe s  trial s  last loss  verdict",
    ]
    for run in result["runs"]:
        hpo = run.get("hpo") or {}
        above = None if run.get("peak_mem_mb") is None else run["peak_mem_mb"] - run["base_mem_mb"]
        lines.append(
            f"{run['round']:>5} {run['side']:5} {_num(run.get('samples_per_s')):>10} {_num(run.get('peak_mem_mb')):>8} "
            f"{_num(above):>14} {_num(hpo.get('probe_s'), '.2f'):>8} {_num(hpo.get('trial_s'), '.2f'):>8} "
            f"{_num(run.get('last_loss'), '.5f'):>10}  {run['verdict'][:60]}"
        )
    goals = summary["goals"]
    share = summary["probe_share"]
    lines += [
        "",
        f"hpo / bare throughput  {_num(summary['throughput_ratio'], '.3f')}x  "
        f"({_num(summary['hpo_samples_per_s'])} vs {_num(summary['bare_samples_per_s'])} samples/s; "
        f"{_goal(summary['throughput_ratio'], goals['throughput_ratio'], True)})",
        f"hpo / bare samples per CPU-second {_num(summary.get('cpu_time_ratio'), '.3f')}x  (CPU only: each process's own CPU time)",
        f"hpo / bare peak memory {_num(summary['peak_mem_ratio'], '.3f')}x  "
        f"({_num(summary['hpo_peak_mem_mb'])} vs {_num(summary['bare_peak_mem_mb'])} MB; "
        f"{_goal(summary['peak_mem_ratio'], goals['peak_mem_ratio'], False)}); above the process's memory "
        f"before the first model: {_num(summary['mem_above_base_ratio'], '.3f')}x",
        f"probe's share of hpo's trial {_num(None if share is None else 100 * share)}% "
        f"({_goal(share, goals['probe_share'], False, '%', 100)})",
        f"MFU with hpo's FLOP count: hpo {_num(_pct(summary['hpo_mfu']))}%, bare {_num(_pct(summary['bare_mfu']))}% "
        f"(hpo's own record: {_num(_pct(summary['hpo_reported_mfu']))}%, "
        f"{_num(summary['hpo_reported_samples_per_s'])} samples/s)",
        f"last training loss, hpo against bare: largest relative difference {_num(summary['last_loss_max_rel_diff'], '.2e')}",
    ]
    return "\n".join(lines)


def _pct(value: float | None) -> float | None:
    return None if value is None else 100 * value
