"""Kernels of this host that compute wrong results, checked directly, so that the zoo's tests hold
on every host: where a kernel is wrong, hpo must reject the value it serves (a true verdict), and
where it is right, the value must pass.

Found on an Intel Xeon with AMX (torch 2.13.0+cpu, 2026-11-28): oneDNN's bf16 conv1d with 4 groups
(wav2vec2's positional convolution: 32 channels, kernel 16) returns values 110% off fp32, while 1
and 2 groups, and the same conv with oneDNN off, are within bf16's rounding (0.3%). The AMD host
with avx512_bf16 of the committed zoo table and the H200 compute it right (wav2vec2's bf16
gradient error 0.004 and 0.005; 0.10 on the AMX host). Upstream reports of the same family:
pytorch/pytorch#163347 and #169688 (wrong bf16 CPU convolutions through oneDNN)."""

from __future__ import annotations

import functools

import torch

__all__ = ["HOST_KERNEL_FAULTS", "bf16_grouped_conv1d_is_wrong"]


@functools.cache
def bf16_grouped_conv1d_is_wrong() -> bool:
    """Whether this CPU's bf16 grouped conv1d is off fp32 by more than 10 times bf16's rounding."""
    generator = torch.Generator().manual_seed(0)
    x, w = torch.randn(4, 32, 49, generator=generator), torch.randn(32, 8, 16, generator=generator)
    exact = torch.nn.functional.conv1d(x.double(), w.double(), padding=8, groups=4)
    bf16 = torch.nn.functional.conv1d(x.bfloat16(), w.bfloat16(), padding=8, groups=4).double()
    return ((bf16 - exact).norm() / exact.norm()).item() > 10 * 2**-8


# model -> (knob, value, whether this host's kernel for it is wrong)
HOST_KERNEL_FAULTS = {"wav2vec2": ("precision", "bf16", bf16_grouped_conv1d_is_wrong)}
