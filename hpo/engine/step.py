"""One training step of an assembled model: the single step runner the probe and the trainer share.

Forward under the knobs, backward (scaled for fp16), the finite check, then, when the step updates,
the optimizer step and the fp16 loss-scale guard. Callers wrap it in the evidence profiler when
they want to see what ran (the profiler lives in a higher layer).
"""

from __future__ import annotations

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
    if not torch.isfinite(loss):
        clear_grads(assembled.optimizer)  # no update from a non-finite step
        raise NonFiniteLoss(step, loss.item())
    if update:
        assembled.optimizer_step()
        assembled.check_scaler(step)
    return loss
