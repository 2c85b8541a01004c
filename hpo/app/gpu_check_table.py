"""`hpo gpu-check`'s markdown table: a line per combination, then each workload's fastest ok one."""

from __future__ import annotations

from hpo.knobs.systems import TRIAL_KNOBS

__all__ = ["markdown"]


def _line(r: dict) -> str:
    k = r["knobs"]
    sps = "" if r.get("samples_per_s") is None else f"{r['samples_per_s']:.0f}"
    speed = "" if r.get("speedup_vs_fp32_eager") is None else f"{r['speedup_vs_fp32_eager']:.2f}"
    verdict = r["verdict"] if len(r["verdict"]) < 70 else r["verdict"][:67] + "..."
    knobs = " | ".join(str(k.get(name, "")) for name in TRIAL_KNOBS)
    return f"| {r['workload']} | {knobs} | {verdict} | {sps} | {speed} |"


def markdown(rows: list[dict], device: str) -> str:
    """A table of every row, then the fastest ok combination of each workload."""
    lines = [
        f"Knob verification on {device}",
        "",
        "| workload | " + " | ".join(k.header for k in TRIAL_KNOBS.values()) + " | verdict | samples/s | x fp32/eager |",
        "|---|" + "---|" * (len(TRIAL_KNOBS) + 3),
        *(_line(r) for r in rows),
    ]
    for workload in sorted({r["workload"] for r in rows}):
        ok = [r for r in rows if r["workload"] == workload and r["verdict"] == "ok" and r.get("samples_per_s")]
        if ok:
            best = max(ok, key=lambda r: r["samples_per_s"])
            lines.append(
                f"\nBest on {workload}: {best['knobs']} at {best['samples_per_s']:.0f} samples/s "
                f"({best['speedup_vs_fp32_eager']:.2f}x fp32/eager)"
            )
    return "\n".join(lines)
