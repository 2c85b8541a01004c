"""DAWNBench-style ranking of knob combinations: training time to a fixed validation metric.

Each combination that `benchmarks.knobs` verified (verdict `ok`) trains the same model from the same
seed and learning rate until an evaluation reaches the target, or `max_steps`. Training time is
hpo's `train_s` up to that evaluation: the steps only, not the probe, the evaluations or the
profiled evidence step. A faster step reaches the target sooner only if its numerics learn as well,
which is exactly what this table shows and a samples/s table cannot.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass

from benchmarks.knobs import KnobsBench, knobs_of, trial_config
from hpo.config.objectives import metric_direction
from hpo.config.trial import Target
from hpo.errors import UserInputError
from hpo.trial import execute
from hpo.verify.stored import MemoryVerdicts
from hpo.workloads.catalog import metrics_of

__all__ = ["TargetRun", "run_time_to_target", "target_table"]


@dataclass(frozen=True, kw_only=True)
class TargetRun:
    """Train to `metric` reaching `value`, evaluating every `eval_every` steps, for at most `max_steps`."""

    metric: str
    value: float
    max_steps: int = 600
    eval_every: int = 20

    def target(self, workload: str) -> Target:
        """The target, in the direction `workload` declares for the metric (never guessed)."""
        direction = metric_direction(self.metric, metrics_of(workload))
        if direction is None:
            raise UserInputError(f"--target: workload {workload!r} declares no direction for {self.metric!r}")
        return Target(self.metric, self.value, direction)


def run_time_to_target(bench: KnobsBench, configs: list[str], run: TargetRun, log: Callable[[str], None]) -> list[dict]:
    """One row per config: time to target, throughput and MFU, and the ratio to the baseline's time."""
    verdicts, rows = MemoryVerdicts(), []
    for name in configs:
        config = trial_config(bench, knobs_of(name), run.max_steps, eval_every=run.eval_every)
        config = dataclasses.replace(config, training=dataclasses.replace(config.training, target=run.target(config.workload)))
        outcome = execute(config, verdicts)
        attrs = outcome.attrs
        row = {
            "config": name,
            "knobs": config.knobs.as_dict(),
            "verdict": str(outcome.verdict),
            "reached": attrs.get("target_reached"),
            "time_to_target_s": attrs.get("time_to_target_s"),
            "steps_run": attrs.get("steps_run"),
            "train_samples_per_s": attrs.get("train_samples_per_s"),
            "mfu": attrs.get("mfu"),
            "final_metric": (attrs.get("metrics") or {}).get(run.metric),
        }
        rows.append(row)
        reached = "-" if row["time_to_target_s"] is None else f"{row['time_to_target_s']:.1f} s"
        log(f"time to {run.metric} {run.value}: {name:16s} {reached} ({row['steps_run']} steps, {row['verdict'][:50]})")
    base = next((r["time_to_target_s"] for r in rows if r["config"] == "baseline"), None)
    for row in rows:
        ok = base is not None and row["time_to_target_s"] is not None
        row["speedup_vs_baseline"] = base / row["time_to_target_s"] if ok else None
    return rows


def target_table(run: dict, rows: list[dict]) -> str:
    """Markdown, fastest first; a combination that never reached the target last."""
    lines = [
        f"\ntime to {run['metric']} {run['value']} (evaluated every {run['eval_every']} steps, at most {run['max_steps']})",
        "",
        "| config | time to target | × baseline | steps | samples/s | MFU | verdict |",
        "|---|---|---|---|---|---|---|",
    ]
    ordered = sorted(rows, key=lambda r: (r["time_to_target_s"] is None, r["time_to_target_s"] or 0.0))
    for r in ordered:
        time_s = "not reached" if r["time_to_target_s"] is None else f"{r['time_to_target_s']:.1f} s"
        speedup = "" if r["speedup_vs_baseline"] is None else f"{r['speedup_vs_baseline']:.2f}"
        sps = "" if r["train_samples_per_s"] is None else f"{r['train_samples_per_s']:.1f}"
        mfu = "" if r["mfu"] is None else f"{100 * r['mfu']:.1f}%"
        lines.append(f"| {r['config']} | {time_s} | {speedup} | {r['steps_run'] or ''} | {sps} | {mfu} | {r['verdict'][:60]} |")
    return "\n".join(lines)
