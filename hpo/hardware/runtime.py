"""Device choice and the global torch state a trial runs under, restored on exit."""

from __future__ import annotations

import contextlib
import os
import random
from collections.abc import Iterator

import numpy as np
import torch

from hpo.errors import UserInputError


def resolve_device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    device = torch.device(name)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise UserInputError(f"device: {name!r} asked for, but torch sees no CUDA device; use 'cpu' or 'auto'")
    return device


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)  # seeds CUDA generators too


@contextlib.contextmanager
def trial_runtime(device: torch.device) -> Iterator[dict]:
    """TF32 and cudnn.benchmark on for CUDA trials, restored afterwards; yields the settings used."""
    saved = (
        torch.backends.cuda.matmul.allow_tf32,
        torch.backends.cudnn.allow_tf32,
        torch.backends.cudnn.benchmark,
    )
    on_cuda = device.type == "cuda"
    torch.backends.cuda.matmul.allow_tf32 = on_cuda
    torch.backends.cudnn.allow_tf32 = on_cuda
    torch.backends.cudnn.benchmark = on_cuda
    try:
        yield {"tf32": on_cuda, "cudnn_benchmark": on_cuda}
    finally:
        (
            torch.backends.cuda.matmul.allow_tf32,
            torch.backends.cudnn.allow_tf32,
            torch.backends.cudnn.benchmark,
        ) = saved


class MemoryMeter:
    """Peak memory of one trial. CUDA: the allocator's peak since reset. CPU: the largest resident
    set sampled at the step's high-water marks (after forward, when activations are alive), so
    it is this trial's own figure even when trials share a process (ru_maxrss never resets)."""

    def __init__(self, device: torch.device):
        self.device, self.peak_bytes = device, 0
        if device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(device)

    def sample(self) -> None:
        if self.device.type != "cuda":
            self.peak_bytes = max(self.peak_bytes, _resident_bytes())

    @property
    def peak_mb(self) -> float:
        if self.device.type == "cuda":
            return torch.cuda.max_memory_allocated(self.device) / 2**20
        return self.peak_bytes / 2**20


def _resident_bytes() -> int:
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError):  # not Linux: fall back to the process peak
        import resource

        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)
