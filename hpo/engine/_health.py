"""A training run's health, kept on the device between check boundaries and read at them.

An ordinary step only records (`DeviceHealth.record`: two tiny kernels, no host read), so the
host never waits for the device mid-interval and launches the next step while the device still
runs this one. A check boundary (`DeviceHealth.read`) makes the one host read: whether any loss
since the start was non-finite, the first step that was and its loss, the last loss, and under
fp16 the GradScaler's current scale.

Why no `torch._assert_async` (torchtitan's NaN check): on CUDA a failed device assert is a sticky
error that poisons the process's CUDA context, so a trial that merely diverged (too high a learning
rate) would end as a crash and take its worker process with it. Divergence is an outcome hpo
records, not a bug, so it is a flag read at the boundary.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

__all__ = ["DeviceHealth", "HealthReading", "NonFiniteLoss"]


class NonFiniteLoss(ArithmeticError):
    """The loss of a step was NaN or infinite. The caller decides what that means: a trial that
    diverged (the trainer) or knobs the model overflows under (the probe)."""

    def __init__(self, step: int, loss: float):
        super().__init__(f"step {step}: loss is {loss}")
        self.step, self.loss = step, loss


@dataclass(frozen=True)
class HealthReading:
    """What one check boundary read. `first_bad_step` is the first step since the last reset
    whose loss was not finite (None: none was); `scale` is fp16's loss scale now (None: no scaler)."""

    loss: float
    first_bad_step: int | None = None
    first_bad_loss: float | None = None
    scale: float | None = None


class DeviceHealth:
    """The losses of the steps since the last boundary, as device tensors, folded into a sticky
    first-bad-step index (-1 while every loss was finite) and that step's loss.

    A step's record is two tiny kernels (its loss and its step number into a buffer); the
    non-finite test runs over the buffer once it is full and at each boundary. Testing every loss as
    it came took seven kernels a step, 35 us of a 17 ms CPU step."""

    CAPACITY = 64  # steps recorded between folds

    def __init__(self, device: torch.device):
        self._first_bad_step = torch.full((), -1.0, device=device)  # float32: exact below 2**24 steps
        self._first_bad_loss = torch.zeros((), device=device)
        self._last_loss = torch.full((), math.nan, device=device)
        self._losses = torch.zeros(self.CAPACITY, device=device)
        self._steps = torch.zeros(self.CAPACITY, device=device)
        self._recorded = 0

    def record(self, step: int, loss: torch.Tensor) -> None:
        """Note step `step`'s loss on the device: only the first non-finite one is kept."""
        # A view of the buffer's slot, not the step's own tensor: a CUDA-graph step's output is
        # overwritten by its next replay. The slot is not written again before 64 more records.
        self._last_loss = self._losses[self._recorded]
        self._last_loss.copy_(loss.detach().reshape(()))
        self._steps[self._recorded].fill_(step)
        self._recorded += 1
        if self._recorded == self.CAPACITY:
            self._fold()

    def _fold(self) -> None:
        """The buffer's first non-finite loss into the sticky flag, on the device; empties it."""
        if not self._recorded:
            return
        losses, steps = self._losses[: self._recorded], self._steps[: self._recorded]
        bad = ~torch.isfinite(losses)
        # The first bad one (argmax returns the first maximum), picked by index_select: indexing with
        # a 0-dim tensor may read it on the host.
        first = bad.to(torch.uint8).argmax().reshape(1)
        new = torch.logical_and(bad.any(), self._first_bad_step < 0)
        self._first_bad_step = torch.where(new, steps.index_select(0, first).reshape(()), self._first_bad_step)
        self._first_bad_loss = torch.where(new, losses.index_select(0, first).reshape(()), self._first_bad_loss)
        self._recorded = 0

    def read(self, scale: torch.Tensor | None = None) -> HealthReading:
        """The boundary's one host read (it waits for the device): the flags, the last loss, and
        `scale` (fp16's loss scale tensor) when given."""
        self._fold()
        values = [self._first_bad_step, self._first_bad_loss, self._last_loss]
        if scale is not None:
            values.append(scale.float().reshape(()).to(self._last_loss.device))
        first_step, first_loss, loss, *rest = torch.stack(values).tolist()
        bad = first_step >= 0
        return HealthReading(
            loss=loss,
            first_bad_step=int(first_step) if bad else None,
            first_bad_loss=first_loss if bad else None,
            scale=rest[0] if rest else None,
        )
