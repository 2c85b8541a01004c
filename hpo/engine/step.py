"""One training step of an assembled model: the single step runner the probe and the trainer share.

Forward under the knobs, backward (scaled for fp16), clipping, then one device-to-host read (the
step's only sync: the loss, and under fp16 the gradients' inf flag and the loss scale) that decides
the rest: a non-finite loss raises before any update, an fp16 step with inf gradients is skipped as
GradScaler skips it, and the loss-scale guard needs no read of its own. Callers wrap it in the
evidence profiler when they want to see what ran (the profiler lives in a higher layer).
"""

from __future__ import annotations

import math

import torch

from hpo.engine.assembly import AssembledModel
from hpo.knobs.optimizers import clear_grads
from hpo.workloads.base import Batch

__all__ = ["NonFiniteLoss", "run_step"]


class NonFiniteLoss(ArithmeticError):
    """The loss of a step was NaN or infinite. The caller decides what that means: a trial that
    diverged (the trainer) or knobs the model overflows under (the probe)."""

    def __init__(self, step: int, loss: float):
        super().__init__(f"step {step}: loss is {loss}")
        self.step, self.loss = step, loss


def run_step(assembled: AssembledModel, batch: Batch, step: int, *, update: bool = True) -> torch.Tensor:
    """Run one step on a batch already on the device; returns the detached, unscaled loss. Without
    `update` the gradients are left on the parameters (the probe compares them)."""
    loss = assembled.forward_backward(batch)
    health = assembled.step_health(loss, clip=update)  # the step's one host sync
    if not math.isfinite(health.loss):
        clear_grads(assembled.optimizer)  # no update from a non-finite step
        raise NonFiniteLoss(step, health.loss)
    if update:
        assembled.optimizer_step(health)
        assembled.check_scaler(step, health)
    return loss
