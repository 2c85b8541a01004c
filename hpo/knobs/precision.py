"""Precision knob: autocast dtype, and a GradScaler only for fp16."""

from __future__ import annotations

import contextlib

import torch

DTYPES: dict[str, torch.dtype] = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}


def autocast(precision: str, device_type: str) -> contextlib.AbstractContextManager:
    """The autocast region for `precision`; fp32 disables autocast rather than entering a no-op one."""
    if precision == "fp32":
        return contextlib.nullcontext()
    return torch.autocast(device_type=device_type, dtype=DTYPES[precision])


def grad_scaler(precision: str, device_type: str) -> torch.amp.GradScaler | None:
    """fp16 gradients underflow without loss scaling; bf16 has fp32's exponent range and needs none."""
    if precision != "fp16":
        return None
    return torch.amp.GradScaler(device_type)
