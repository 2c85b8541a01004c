"""How far a trial's loss and gradients may drift from the fp32/eager reference, on this model.

A bound is measured on the model in front of the probe, not assumed per precision. The model's
rounding floor is the relative error of the reference's own step when every value it computes is
rounded to the trial precision's mantissa (`hpo.verify.probing._rounding`): what rounding alone explains on
this model and these samples. The bound is that floor times FLOOR_FACTOR, and never under a few
units of the precision's roundoff or the slack every kernel swap needs, nor above ORDER_ONE.

Why a measured floor: one constant per precision cannot hold across architectures. On a
BatchNorm ResNet in train mode over 4 samples bf16's gradients differ from fp32's by 0.57 (a
constant of 0.25 rejected bf16, which trains that model), while on a LayerNorm transformer they
differ by 0.002-0.007, where 0.25 lets a kernel 10% wrong through. The floor tracks both: on the
zoo's models (benchmarks/rounding_floors.py) the trial's real gradient error was 0.54-3.87 times
its floor.

A broken kernel still fails: a non-finite value fails before any bound, an error of ORDER_ONE is
never rounding (a gradient off by as much as its own size), and anything beyond FLOOR_FACTOR times
what rounding explains on this model is rejected.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from hpo.knobs.registry import PRECISION_SPECS
from hpo.torch_compat import foreach_norm, foreach_sub
from hpo.verify.probing._rounding import FP32_MANTISSA_BITS

__all__ = ["FLOOR_FACTOR", "NO_FLOOR", "ORDER_ONE", "Errors", "NumericBound", "bound_from_floor", "relative_errors"]

# The trial's error over its floor: measured ratios 0.54-3.87 for gradients on the zoo
# (benchmarks/rounding_floors.py, docs/failures.md); twice the largest.
FLOOR_FACTOR = 8.0
# The least bound, in units of the precision's roundoff 2^-(bits+1): a floor can come out near zero
# by cancellation (a loss is one number), where the real kernels' rounding does not cancel alike.
ROUNDOFF_UNITS = 8
# Any trial, fp32 included, swaps kernels (SDPA against eager attention, TF32 matmuls on CUDA in
# both): a relative error of 1e-3 on the loss and 1e-2 on the gradients is summation order.
KERNEL_SLACK_LOSS, KERNEL_SLACK_GRAD = 1e-3, 1e-2
# An error as large as the value itself is never rounding, whatever the model.
ORDER_ONE = 1.0


@dataclass(frozen=True)
class Errors:
    """Relative errors against the reference: |loss - ref| / |ref| and ||g - g_ref|| / ||g_ref||
    over all parameters."""

    loss: float
    grad: float


NO_FLOOR = Errors(0.0, 0.0)  # fp32: the reference itself, nothing to round


@dataclass(frozen=True)
class NumericBound:
    """The bound on a trial's errors under `precision` on one model, and the floor it came from."""

    precision: str
    floor: Errors
    bound: Errors

    def exceeded_by(self, errors: Errors) -> str | None:
        """Why `errors` fail the bound, or None when they are within it."""
        for what, error, bound, floor in (
            ("loss", errors.loss, self.bound.loss, self.floor.loss),
            ("gradients", errors.grad, self.bound.grad, self.floor.grad),
        ):
            if error > bound:
                return (
                    f"{what} {'differs' if what == 'loss' else 'differ'} from fp32/eager by {error:.3g} "
                    f"(bound {bound:.3g} for {self.precision} on this model; rounding alone gives {floor:.3g})"
                )
        return None


def bound_from_floor(precision: str, floor: Errors) -> NumericBound:
    """The bound for `precision` given the model's measured rounding floor."""
    roundoff = 2.0 ** -(min(PRECISION_SPECS[precision].mantissa_bits, FP32_MANTISSA_BITS) + 1)
    least_loss = max(KERNEL_SLACK_LOSS, ROUNDOFF_UNITS * roundoff)
    least_grad = max(KERNEL_SLACK_GRAD, ROUNDOFF_UNITS * roundoff)
    bound = Errors(
        loss=min(ORDER_ONE, max(least_loss, FLOOR_FACTOR * floor.loss)),
        grad=min(ORDER_ONE, max(least_grad, FLOOR_FACTOR * floor.grad)),
    )
    return NumericBound(precision, floor, bound)


def relative_errors(loss: float, grads: list[torch.Tensor], ref_loss: float, ref_grads: list[torch.Tensor]) -> Errors:
    """Relative errors of a step's loss and gradients against the reference's. Norms per tensor with
    foreach kernels, then of those: one pass, no Python loop over tensors."""
    diff = _global_norm(foreach_sub(grads, ref_grads))
    grad = (diff / _global_norm(ref_grads).clamp_min(1e-12)).item()
    return Errors(loss=abs(loss - ref_loss) / max(abs(ref_loss), 1e-12), grad=grad)


def _global_norm(tensors: list[torch.Tensor]) -> torch.Tensor:
    return torch.linalg.vector_norm(torch.stack(foreach_norm(tensors)))
