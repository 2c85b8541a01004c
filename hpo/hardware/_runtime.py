"""Device choice and the global torch state a trial runs under, restored on exit."""

from __future__ import annotations

import contextlib
import os
import random
from collections.abc import Iterator

import numpy as np
import torch

from hpo.errors import UserInputError
from hpo.hardware import _tf32 as tf32
from hpo.hardware._allocator import keep_freed_memory, release_freed_memory
from hpo.hardware.probes import tf32_supported
from hpo.records import RuntimeSettings


def resolve_device(name: str) -> torch.device:
    """The device a config names. An explicit `cuda:N` must be an ordinal this process sees: a worker
    hpo pins to one GPU (CUDA_VISIBLE_DEVICES) sees that GPU as cuda:0 and no other, so `cuda:3`
    there is refused rather than mapped onto whichever GPU the worker got."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    device = torch.device(name)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise UserInputError(f"device: {name!r} asked for, but torch sees no CUDA device; use 'cpu' or 'auto'")
    if device.type == "cuda" and device.index is not None and device.index >= torch.cuda.device_count():
        visible = os.environ.get("CUDA_VISIBLE_DEVICES")
        raise UserInputError(
            f"device: {name!r} asked for, but this process sees {torch.cuda.device_count()} CUDA device(s)"
            + (f" (CUDA_VISIBLE_DEVICES={visible!r})" if visible is not None else "")
            + "; hpo pins each worker to one GPU, so use device: 'auto' and choose GPUs with CUDA_VISIBLE_DEVICES"
        )
    return device


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)  # seeds CUDA generators too


@contextlib.contextmanager
def trial_runtime(device: torch.device) -> Iterator[dict]:
    """TF32 (`hpo.hardware._tf32`) on for CUDA trials, restored afterwards, and the C allocator set to
    keep freed memory (`hpo.hardware._allocator`); yields the settings used. cudnn.benchmark is a
    knob's, set around each of a trial's steps (`hpo.knobs.systems`), not the whole process's.
    `tf32` records whether TF32 tensor cores ran fp32 matmuls, so it is False on a pre-Ampere GPU.
    The allocator setting stays (glibc cannot go back to its adaptive thresholds); its free memory
    is handed back."""
    on_cuda = device.type == "cuda"
    try:
        with tf32.enabled() if on_cuda else contextlib.nullcontext():
            ran_tf32 = on_cuda and tf32_supported(device).usable
            yield RuntimeSettings(tf32=ran_tf32, cpu_allocator=keep_freed_memory()).model_dump()
    finally:
        release_freed_memory()


@contextlib.contextmanager
def torch_threads(threads: int) -> Iterator[None]:
    """torch's intra-op threads set to `threads` inside the block, restored after: global torch
    state changes only inside a context that puts it back."""
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)
