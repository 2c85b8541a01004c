"""The tables `scripts/bench-knobs` prints from `benchmarks.knobs.run_knobs`'s result."""

from __future__ import annotations

__all__ = ["table"]


def fmt(value, spec: str) -> str:
    """`format(value, spec)`, or a '-' of the same width for a missing value."""
    return format(value, spec) if value is not None else format("-", ">" + spec.split(".")[0])


def _rows(result: dict) -> list[str]:
    meta = result["meta"]
    lines = [
        f"\n{meta['workload']} {meta['workload_options']} on {meta['device_model']}, batch {meta['batch_size']}, "
        f"{meta['steps']} steps (bf16: {meta['bf16']}), median of {meta['repeats']} interleaved repeats; ratios are vs "
        f"baseline (fp32 / eager / for-loop AdamW)",
        f"{meta['peak_mem_means']}; compile row: mode 'default', backend {meta['compile_backend']}",
        f"{'config':16s} {'samples/s':>10s} {'x':>6s} {'step ms':>9s} {'x':>6s} {'peak MB':>8s} {'x':>6s} "
        f"{'slowdown':>8s}  verdict",
    ]
    for r in result["rows"]:
        lines.append(
            f"{r['config']:16s} {fmt(r['samples_per_s'], '10.1f')} {fmt(r['samples_per_s_ratio'], '6.2f')} "
            f"{fmt(r['step_ms'], '9.1f')} {fmt(r['step_ms_ratio'], '6.2f')} {fmt(r['peak_mem_mb'], '8.1f')} "
            f"{fmt(r['peak_mem_mb_ratio'], '6.2f')} {fmt(r['slowdown'], '8.2f')}  {r['verdict'][:70]}"
        )
    return lines


def _overhead(o: dict) -> list[str]:
    return [
        f"\nverification overhead (default knobs, {o['steps']}-step trial; verdict {o['verdict'][:40]})",
        f"  probe          {fmt(o['probe_s'], '.3f')} s of a {fmt(o['probed_trial_s'], '.2f')} s trial = "
        f"{fmt(o['probe_fraction'] and 100 * o['probe_fraction'], '.2f')}%  (first probe of a study: times the reference too)",
        f"  later probe    {fmt(o['later_probe_s'], '.3f')} s of a {fmt(o['later_trial_s'], '.2f')} s trial = "
        f"{fmt(o['later_probe_fraction'] and 100 * o['later_probe_fraction'], '.2f')}%  (target < 5%)",
        f"  cached verdict {1e3 * o['cached_lookup_s']:.3f} ms of a {o['cached_trial_s']:.2f} s trial = "
        f"{100 * o['cached_fraction']:.4f}%  (target < 0.5%)",
    ]


def table(result: dict) -> str:
    """One row per config with its ratios to the baseline, then the verification overhead."""
    return "\n".join(_rows(result) + _overhead(result["overhead"]))
