"""Observe the dtype that reaches each matmul-class kernel, below autocast, at the dispatcher."""

from __future__ import annotations

from collections import Counter

import torch
from torch.utils._python_dispatch import TorchDispatchMode

# aten ops that autocast runs in its lower precision; their output dtype is what the precision knob did.
ATEN_MATMUL_OPS = frozenset(
    {
        "mm", "addmm", "bmm", "baddbmm", "convolution", "_convolution", "mkldnn_rnn_layer",
        "_scaled_dot_product_flash_attention", "_scaled_dot_product_flash_attention_for_cpu",
        "_scaled_dot_product_efficient_attention", "_scaled_dot_product_cudnn_attention",
    }
)


class MatmulDtypeRecorder(TorchDispatchMode):
    def __init__(self) -> None:
        super().__init__()
        self.dtypes: Counter = Counter()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        if func.overloadpacket.__name__ in ATEN_MATMUL_OPS:
            first = out[0] if isinstance(out, (tuple, list)) else out
            if isinstance(first, torch.Tensor):
                self.dtypes[str(first.dtype).removeprefix("torch.")] += 1
        return out
