"""How far a trial's loss and gradients may drift from the fp32/eager reference on the same batch.

Relative errors: |loss - ref| / |ref| and ||g - g_ref|| / ||g_ref|| over all parameters. bf16 keeps
8 mantissa bits (relative rounding 2^-8 ~ 0.4% per op) and fp16 keeps 11 (0.05%); errors compound
through a network's depth, so the bounds sit well above one rounding step yet far below what a
broken kernel or an overflow produces (errors of order 1 or non-finite values). fp32 has slack for
TF32 matmuls on CUDA, which round inputs to 10 mantissa bits.
"""

from dataclasses import dataclass


@dataclass(frozen=True)
class Tolerance:
    loss: float
    grad: float


TOLERANCES: dict[str, Tolerance] = {
    "fp32": Tolerance(loss=1e-3, grad=1e-2),
    "bf16": Tolerance(loss=5e-2, grad=0.25),
    "fp16": Tolerance(loss=1e-2, grad=0.1),
}
