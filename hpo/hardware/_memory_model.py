"""Peak memory against batch size, and the limit it is held to (`study.memory_limit_gb`).

The model, per knob combination (`docs/memory.md`): peak = fixed + per_sample x batch. `fixed` is
what a step holds whatever its batch (weights, gradients, optimizer state, the CUDA context's
allocations or, on a CPU, the process's resident set before the step); `per_sample` is what one
more sample adds (activations kept for backward, the batch itself). It assumes a step's memory
grows linearly with the batch at a fixed sequence length, which holds while no kernel changes
its workspace with the batch size; the error that remains is recorded on every trial
(`predicted_peak_mb` beside `peak_mem_mb`).

Sizes are in bytes; a GB here is 2**30 bytes, as the CUDA tools and torch report them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

__all__ = ["GB", "PeakModel", "cuda_margin_bytes", "default_limit_bytes", "fit_peaks", "limit_bytes"]

GB = 2**30
# What the CUDA default leaves free of the device's total: the CUDA context and library workspaces
# (cuBLAS, cuDNN), which the allocator's peak does not count, and the caching allocator's
# fragmentation (reserved over allocated). 1 GB, or 5% of a device over 20 GB.
CUDA_MARGIN_FRACTION = 0.05
CUDA_MARGIN_MIN_BYTES = 1 * GB


def cuda_margin_bytes(total_bytes: int) -> int:
    return max(CUDA_MARGIN_MIN_BYTES, int(total_bytes * CUDA_MARGIN_FRACTION))


def default_limit_bytes(device: torch.device) -> int | None:
    """The limit when none is set: on CUDA the device's total memory less `cuda_margin_bytes`;
    elsewhere none (a CPU's memory is shared with everything else on the machine)."""
    if device.type != "cuda":
        return None
    total = torch.cuda.mem_get_info(device)[1]
    return total - cuda_margin_bytes(total)


def limit_bytes(device: torch.device, memory_limit_gb: float | None) -> int | None:
    """The trial's memory limit in bytes: the study's, or the device's default."""
    if memory_limit_gb is not None:
        return int(memory_limit_gb * GB)
    return default_limit_bytes(device)


@dataclass(frozen=True)
class PeakModel:
    """peak = fixed_bytes + per_sample_bytes x batch, fitted to `points` ((batch, peak bytes))."""

    fixed_bytes: float
    per_sample_bytes: float
    points: tuple[tuple[int, int], ...]

    def predict(self, batch: int) -> float:
        return self.fixed_bytes + self.per_sample_bytes * batch

    def largest_fitting(self, limit: int, ceiling: int, multiple_of: int = 1) -> int:
        """The largest batch up to `ceiling`, a multiple of `multiple_of`, predicted to fit `limit`;
        0 when not even `multiple_of` samples fit."""
        if self.per_sample_bytes <= 0:
            largest = ceiling if self.fixed_bytes <= limit else 0
        else:
            largest = min(ceiling, int((limit - self.fixed_bytes) // self.per_sample_bytes))
        return max(0, largest // multiple_of * multiple_of)

    def record(self) -> dict:
        return {
            "fixed_bytes": self.fixed_bytes,
            "per_sample_bytes": self.per_sample_bytes,
            "points": [list(p) for p in self.points],
        }

    @classmethod
    def from_record(cls, record: dict) -> PeakModel:
        return cls(record["fixed_bytes"], record["per_sample_bytes"], tuple((int(b), int(p)) for b, p in record["points"]))


def fit_peaks(points: Sequence[tuple[int, int]]) -> PeakModel:
    """Least squares through (batch, peak) points at two or more batch sizes. A slope below zero
    (a meter's noise over a step that grows little with the batch) is taken as zero, with the
    largest peak as the fixed part: the model never predicts less than it measured."""
    batches = {b for b, _ in points}
    if len(batches) < 2:
        raise ValueError(f"fit_peaks needs peaks at two batch sizes or more, got batches {sorted(batches)}")
    # In integers until the one division: peaks that lie on a line give its slope exactly.
    n, sum_b, sum_p = len(points), sum(b for b, _ in points), sum(p for _, p in points)
    covariance = n * sum(b * p for b, p in points) - sum_b * sum_p
    slope = covariance / (n * sum(b * b for b, _ in points) - sum_b**2)
    if slope <= 0:
        return PeakModel(float(max(p for _, p in points)), 0.0, tuple(points))
    # Through the largest batch's peak rather than the means: the prediction is wanted above it.
    top_b, top_p = max(points)
    return PeakModel(top_p - slope * top_b, slope, tuple(points))
