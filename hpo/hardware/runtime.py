"""Device choice and the global torch state a trial runs under, restored on exit."""

from __future__ import annotations

import contextlib
import random
from collections.abc import Iterator

import numpy as np
import torch

from hpo.errors import UserInputError
from hpo.hardware.allocator import keep_freed_memory, release_freed_memory


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
    """TF32 and cudnn.benchmark on for CUDA trials, restored afterwards, and the C allocator set to
    keep freed memory (`hpo.hardware.allocator`); yields the settings used. The allocator setting
    stays (glibc cannot go back to its adaptive thresholds); its free memory is handed back."""
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
        yield {"tf32": on_cuda, "cudnn_benchmark": on_cuda, "cpu_allocator": keep_freed_memory()}
    finally:
        release_freed_memory()
        (
            torch.backends.cuda.matmul.allow_tf32,
            torch.backends.cudnn.allow_tf32,
            torch.backends.cudnn.benchmark,
        ) = saved


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)
