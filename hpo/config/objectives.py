"""Which way is better for each metric a study may optimize or target: declared, never guessed.

The systems metrics are hpo's own, each with one natural direction. A workload's metrics are
declared by the workload (`metrics = {"val_loss": "minimize", "val_accuracy": "maximize"}`); the
older tuple form names them without a direction, which `hpo validate` refuses for an objective or
a target, since hpo cannot tell whether reaching 0.9 means going up or down.
"""

from __future__ import annotations

from collections.abc import Mapping

__all__ = ["SYSTEM_METRICS", "metric_direction"]

SYSTEM_METRICS: dict[str, str] = {
    "train_samples_per_s": "maximize",  # steady-state training throughput
    "step_time_ms": "minimize",  # median steady-state step
    "peak_mem_mb": "minimize",
    "mfu": "maximize",  # model FLOPs utilization: achieved over the device's peak
    "time_to_target_s": "minimize",  # training seconds until workload.target was reached
}


def metric_direction(metric: str, declared: Mapping[str, str | None]) -> str | None:
    """The direction of a systems metric or a declared workload metric; None when nobody says."""
    return SYSTEM_METRICS.get(metric) or declared.get(metric)
