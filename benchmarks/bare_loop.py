"""The hand-written training loop `bench-vs-bare` holds hpo's against: what a user writes in plain
PyTorch for the same config, like the loop hpo was held against on its first GPU run
(docs/benchmarks/gpu.md).

The same workload (so the same model class and batches), the same seed and initial weights, the
same knobs applied with plain torch (autocast, the pinned SDPA kernel, AdamW's fused or foreach
path, GradScaler for fp16, torch.compile), the same clipping, learning rate and warm-up. Nothing
is read back to the host until the loop ends: no loss check, no timing sync, no evidence.
"""

from __future__ import annotations

import contextlib

import torch

from hpo.config.trial import TrialConfig
from hpo.errors import UserInputError
from hpo.hardware import seed_everything
from hpo.workloads.base import Workload

__all__ = ["ADAMW_FLAGS", "AUTOCAST_DTYPES", "SDPA_KERNELS", "check_supported", "train_bare"]

AUTOCAST_DTYPES = {"fp32": None, "bf16": torch.bfloat16, "fp16": torch.float16}
ADAMW_FLAGS = {"forloop": {"foreach": False}, "foreach": {"foreach": True}, "fused": {"fused": True}}
# The hpo attention values that pin one SDPA kernel; the others need no pin (eager, sdpa, libraries).
SDPA_KERNELS = {
    "sdpa_flash": "FLASH_ATTENTION",
    "sdpa_efficient": "EFFICIENT_ATTENTION",
    "sdpa_cudnn": "CUDNN_ATTENTION",
    "sdpa_math": "MATH",
}


def check_supported(config: TrialConfig) -> None:
    """The knobs the plain loop applies; the rest are refused by name before anything runs."""
    knobs = config.knobs
    if knobs.optimizer not in ADAMW_FLAGS:
        raise UserInputError(
            f"systems.optimizer: the bare loop uses torch's AdamW {sorted(ADAMW_FLAGS)}, got {knobs.optimizer!r}"
        )
    if knobs.grad_checkpointing:
        raise UserInputError("systems.grad_checkpointing: the bare loop trains without checkpointing; set it to false")


def _kernel(attention: str) -> contextlib.AbstractContextManager:
    if attention not in SDPA_KERNELS:
        return contextlib.nullcontext()
    from torch.nn.attention import SDPBackend, sdpa_kernel

    return sdpa_kernel(getattr(SDPBackend, SDPA_KERNELS[attention]))


def _autocast(precision: str, device: torch.device) -> contextlib.AbstractContextManager:
    dtype = AUTOCAST_DTYPES[precision]
    return contextlib.nullcontext() if dtype is None else torch.autocast(device.type, dtype=dtype)


def train_bare(workload: Workload, config: TrialConfig, device: torch.device) -> torch.Tensor:
    """`config.training.max_steps` steps of the plain loop; returns the last loss (on the device)."""
    check_supported(config)
    knobs, training = config.knobs, config.training
    seed_everything(config.seed)  # the initial weights hpo's trial starts from
    model = workload.build_model(knobs.attention).to(device)
    forward = model
    if knobs.compile:
        mode = None if knobs.compile == "default" else knobs.compile
        forward = torch.compile(model, mode=mode, backend=training.compile_backend)
    optimizer = torch.optim.AdamW(
        model.parameters(), lr=training.lr, weight_decay=training.weight_decay, **ADAMW_FLAGS[knobs.optimizer]
    )
    warmup = training.warmup_steps
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: min(1.0, (s + 1) / warmup)) if warmup else None
    scaler = torch.amp.GradScaler(device.type) if knobs.precision == "fp16" else None
    batches = workload.train_batches(training.batch_size, config.seed)
    model.train()
    for _ in range(training.max_steps):
        batch = {k: v.to(device, non_blocking=True) for k, v in next(batches).items()}
        with _kernel(knobs.attention):
            with _autocast(knobs.precision, device):
                loss = workload.training_loss(forward, batch)
            (loss if scaler is None else scaler.scale(loss)).backward()
        if scaler is not None:
            scaler.unscale_(optimizer)  # clip in the loss's own units
        if training.grad_clip > 0:
            torch.nn.utils.clip_grad_norm_(model.parameters(), training.grad_clip)
        if scaler is None:
            optimizer.step()
        else:
            scaler.step(optimizer)
            scaler.update()
        optimizer.zero_grad(set_to_none=True)
        if scheduler is not None:
            scheduler.step()
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return loss.detach()
