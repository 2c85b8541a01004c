"""Where a host's workers run: one per visible GPU, or one on a CPU-only host."""

from __future__ import annotations

import os

__all__ = ["GPU_DRIVER_PATHS", "default_workers", "visible_gpus"]

# Where a Linux host (or a container given GPUs) shows an NVIDIA or AMD GPU driver.
GPU_DRIVER_PATHS = (
    "/proc/driver/nvidia",
    "/dev/nvidiactl",
    "/dev/kfd",
)


def default_workers() -> int:
    """One worker per visible GPU; on CPU one, since a trial's kernels already use every core."""
    if not any(os.path.exists(path) for path in GPU_DRIVER_PATHS):
        return 1  # no NVIDIA or AMD GPU driver here: no GPU, and no torch import (1 s) to say so
    import torch

    return max(1, torch.cuda.device_count()) if torch.cuda.is_available() else 1


def visible_gpus() -> list[str]:
    """The CUDA_VISIBLE_DEVICES entries this process's workers are spread over."""
    import torch

    if not torch.cuda.is_available():
        return []
    listed = os.environ.get("CUDA_VISIBLE_DEVICES")
    return listed.split(",") if listed else [str(i) for i in range(torch.cuda.device_count())]
