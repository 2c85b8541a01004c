"""How much of a low-precision trial's error rounding alone explains on a given model.

The model runs in fp32 with every op's floating inputs and outputs rounded to the trial precision's
mantissa (`RoundedTo`), forward and backward: what the model computes when each value it handles
keeps only as many significant bits as bf16 or fp16 keep, with no low-precision kernel involved.
Its loss and gradients, against the plain fp32 step on the same samples and weights, give the
model's own rounding floor (`hpo.verify.probing._bounds`). A model whose normalisation divides by a small
batch's spread (BatchNorm in train mode) or whose logits are large amplifies rounding; the floor
measures that amplification instead of assuming one constant per precision.

The rounding keeps fp32's exponent range: overflow and underflow are fp16's loss scale's business
(a non-finite value fails the probe on its own), not rounding's.
"""

from __future__ import annotations

import torch

from hpo.torch_compat import rounding_mode

__all__ = ["FP32_MANTISSA_BITS", "RoundedTo", "round_mantissa"]

FP32_MANTISSA_BITS = 23  # explicit bits; bf16 keeps 7 of them, fp16 10


def round_mantissa(tensor: torch.Tensor, bits: int) -> torch.Tensor:
    """An fp32 tensor rounded to `bits` explicit mantissa bits, to nearest, ties to even."""
    drop = FP32_MANTISSA_BITS - bits
    if drop <= 0:
        return tensor
    raw = tensor.view(torch.int32)
    lowest_kept = (raw >> drop) & 1
    rounded = (raw + ((1 << (drop - 1)) - 1) + lowest_kept) & ~((1 << drop) - 1)
    # Infinities and NaNs pass through unchanged (rounding the payload of a NaN could make it inf).
    return torch.where(torch.isfinite(tensor), rounded.view(torch.float32), tensor)


def RoundedTo(bits: int):
    """Inside it, every op's fp32 inputs and outputs are rounded to `bits` mantissa bits, forward
    and backward (`hpo.torch_compat.rounding_mode`)."""

    def round_fp32(value):
        if isinstance(value, torch.Tensor) and value.dtype == torch.float32:
            return round_mantissa(value, bits)
        return value

    return rounding_mode(round_fp32)
