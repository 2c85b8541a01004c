"""What a study may optimize beside the workload's own metrics: what the systems knobs buy.

Each systems metric has one natural direction; `hpo validate` checks the study's objectives
against the workload's metrics and these, so a typo is caught before any trial runs.
"""

from __future__ import annotations

__all__ = ["SYSTEM_METRICS", "metric_direction"]

SYSTEM_METRICS: dict[str, str] = {
    "train_samples_per_s": "maximize",  # steady-state training throughput
    "step_time_ms": "minimize",  # median steady-state step
    "peak_mem_mb": "minimize",
    "mfu": "maximize",  # model FLOPs utilization: achieved over the device's peak
    "time_to_target_s": "minimize",  # training seconds until workload.target was reached
}


def metric_direction(metric: str, objectives: list[str], directions: list[str]) -> str:
    """The direction of a metric: the study's, when it is an objective; else the systems metric's;
    else a workload metric is minimized unless its name says accuracy (val_accuracy)."""
    if metric in objectives:
        return directions[objectives.index(metric)]
    if metric in SYSTEM_METRICS:
        return SYSTEM_METRICS[metric]
    return "maximize" if "accuracy" in metric else "minimize"
