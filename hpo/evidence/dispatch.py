"""Observe the dtype that reaches each matmul-class kernel, below autocast, at the dispatcher."""

from __future__ import annotations

from collections import Counter

import torch

from hpo.torch_compat import TorchDispatchMode

# Linear and convolution layers: autocast casts them, so their output dtype is what the precision
# knob did. Attention's batched matmuls are recorded apart: a kernel may legitimately compute inside
# in another dtype (SDPA's math path upcasts bf16 to fp32 on CPU), which is not the layer precision.
LAYER_OPS = frozenset({"mm", "addmm", "convolution", "_convolution", "mkldnn_rnn_layer"})
ATTENTION_OPS = frozenset(
    {
        "bmm",
        "baddbmm",
        "_scaled_dot_product_flash_attention",
        "_scaled_dot_product_flash_attention_for_cpu",
        "_scaled_dot_product_efficient_attention",
        "_scaled_dot_product_cudnn_attention",
    }
)


class MatmulDtypeRecorder(TorchDispatchMode):
    def __init__(self) -> None:
        super().__init__()
        self.dtypes: Counter = Counter()  # layer ops
        self.attention_dtypes: Counter = Counter()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        name = func.overloadpacket.__name__
        counter = self.dtypes if name in LAYER_OPS else self.attention_dtypes if name in ATTENTION_OPS else None
        if counter is not None:
            first = out[0] if isinstance(out, (tuple, list)) else out
            if isinstance(first, torch.Tensor):
                counter[str(first.dtype).removeprefix("torch.")] += 1
        return out
