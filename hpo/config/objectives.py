"""Which way is better for each metric a study may optimize or target: declared, never guessed.

The systems metrics are hpo's own, each with one natural direction. A workload's metrics are
declared by the workload (`metrics = {"val_loss": "minimize", "val_accuracy": "maximize"}`); the
older tuple form names them without a direction. An objective's direction is the study's own
(`study.directions`), which must agree with a declared one; a target's comes from the declaration,
or from the study when its metric is also an objective, and is refused otherwise, since hpo cannot
tell whether reaching 0.9 means going up or down.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

__all__ = ["SYSTEM_METRICS", "metric_direction", "study_directions", "worst_value"]

SYSTEM_METRICS: dict[str, str] = {
    "train_samples_per_s": "maximize",  # samples trained over training time, waits for batches included
    "step_time_ms": "minimize",  # median steady-state step
    "peak_mem_mb": "minimize",
    "mfu": "maximize",  # model FLOPs utilization: achieved over the device's peak
    "time_to_target_s": "minimize",  # training seconds until workload.target was reached
}


def worst_value(direction: str) -> float:
    """The value no trial that produced a result can be worse than: a rejected trial's, and an
    objective's that a trial could not produce (docs/failures.md)."""
    return math.inf if direction == "minimize" else -math.inf


def metric_direction(metric: str, declared: Mapping[str, str | None], study: Mapping[str, str] | None = None) -> str | None:
    """The direction of a systems metric or a declared workload metric, else the one the study
    gives it as an objective (`study`: objective -> direction); None when nobody says."""
    return SYSTEM_METRICS.get(metric) or declared.get(metric) or (study or {}).get(metric)


def study_directions(objectives: Sequence[str], directions: Sequence[str]) -> dict[str, str]:
    """Objective -> the direction the study file gives it."""
    return dict(zip(objectives, directions, strict=True))
