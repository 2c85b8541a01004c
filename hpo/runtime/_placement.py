"""Where a host's workers run: one per trial's worth of visible GPUs (a GPU each, or N for a trial of
N ranks, each worker on its own slice of CUDA_VISIBLE_DEVICES), or one on a CPU-only host."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from hpo.config.space import SearchSpace

__all__ = ["GPU_DRIVER_PATHS", "default_workers", "gpu_slices", "gpus_per_trial", "visible_gpus"]

# Where a Linux host (or a container given GPUs) shows an NVIDIA or AMD GPU driver.
GPU_DRIVER_PATHS = (
    "/proc/driver/nvidia",
    "/dev/nvidiactl",
    "/dev/kfd",
)


def gpus_per_trial(space: SearchSpace) -> int:
    """The GPUs one trial of `space` takes: one per rank (`systems.parallel.processes`), else one."""
    return space.parallel["processes"][0] if space.parallel else 1


def default_workers(per_trial: int = 1) -> int:
    """As many workers as trials of `per_trial` GPUs fit on the visible GPUs (at least one); on CPU
    one, since a trial's kernels (or its ranks) already use every core."""
    if not any(os.path.exists(path) for path in GPU_DRIVER_PATHS):
        return 1  # no NVIDIA or AMD GPU driver here: no GPU, and no torch import (1 s) to say so
    import torch

    return max(1, torch.cuda.device_count() // per_trial) if torch.cuda.is_available() else 1


def visible_gpus() -> list[str]:
    """The CUDA_VISIBLE_DEVICES entries this process's workers are spread over: those CUDA shows,
    the leading ones up to the first it cannot use (out of range, repeated, negative)."""
    import torch

    if not torch.cuda.is_available():
        return []
    count, listed = torch.cuda.device_count(), os.environ.get("CUDA_VISIBLE_DEVICES")
    return listed.split(",")[:count] if listed else [str(i) for i in range(count)]


def gpu_slices(gpus: list[str], per_trial: int) -> list[str]:
    """`gpus` cut into consecutive slices of `per_trial`, each a CUDA_VISIBLE_DEVICES value: worker
    i runs its trials' ranks on slice i, so no two workers' trials share a GPU. GPUs left over (fewer
    than a trial needs) get no worker; `hpo validate` refuses a count that leaves any."""
    whole = len(gpus) - len(gpus) % per_trial
    return [",".join(gpus[start : start + per_trial]) for start in range(0, whole, per_trial)]
