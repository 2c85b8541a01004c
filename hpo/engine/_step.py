"""One training step of an assembled model: the single step runner the probe and the trainer share.

Forward under the knobs, backward (scaled for fp16), then clipping and the update, with no host
read: the step's loss goes into the model's `DeviceHealth` on the device, and the caller reads it
at its check boundaries with `AssembledModel.check_health` (the trainer every `check_every` steps,
at each evaluation and at the slow check; the probe, which compares losses, at every step it
judges). Until then a non-finite loss is known only to the device: under fp16 GradScaler skips its
update, under fp32/bf16 the weights take it, and the boundary then ends the trial `diverged` at the
first bad step before anything evaluates them. Callers wrap the step in the evidence profiler when
they want to see what ran (the profiler lives in a higher layer).
"""

from __future__ import annotations

import torch

from hpo.engine._assembly import AssembledModel
from hpo.engine._health import NonFiniteLoss
from hpo.workloads.base import Batch

__all__ = ["NonFiniteLoss", "run_step"]


def run_step(assembled: AssembledModel, batch: Batch, step: int, *, update: bool = True) -> torch.Tensor:
    """Run one step on a batch already on the device; returns the detached, unscaled loss, still on
    the device (reading it is a host sync: do it at a boundary). Without `update` the gradients are
    left on the parameters, neither clipped nor unscaled (the probe compares them)."""
    loss = assembled.forward_backward(batch)
    assembled.health.record(step, loss)
    if update:
        assembled.optimizer_step()
    return loss
