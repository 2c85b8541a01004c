"""Attention backends by name. Every backend computes softmax(q k^T * scale + mask) v on tensors of
shape (batch, heads, seq, head_dim); they differ only in the kernel that runs.

`sdpa_<kernel>` backends call torch SDPA and are pinned to one kernel by `pinned_kernel()`, which the
executor enters around each step, so that SDPA raises instead of quietly choosing another kernel.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable, Iterator

import torch
import torch.nn.functional as F

from hpo import _imports
from hpo.errors import KnobUnavailable

AttentionFn = Callable[..., torch.Tensor]


_CAUSAL_MASKS: dict[tuple[int, int, torch.device], torch.Tensor] = {}


def causal_mask(q_len: int, k_len: int, device: torch.device) -> torch.Tensor:
    """Boolean lower-triangular mask, built once per (lengths, device) and reused by every call."""
    key = (q_len, k_len, device)
    mask = _CAUSAL_MASKS.get(key)
    if mask is None:
        mask = _CAUSAL_MASKS[key] = torch.ones(q_len, k_len, dtype=torch.bool, device=device).tril()
    return mask


def eager_attention(q, k, v, *, attn_mask=None, is_causal=False, dropout_p=0.0, scale=None):
    """Explicit matmul + softmax: the reference every other backend is compared with."""
    scale = 1.0 / math.sqrt(q.size(-1)) if scale is None else scale
    scores = torch.matmul(q, k.transpose(-2, -1)) * scale
    if is_causal:
        scores = scores.masked_fill(~causal_mask(q.size(-2), k.size(-2), q.device), float("-inf"))
    if attn_mask is not None:
        scores = scores.masked_fill(~attn_mask, float("-inf")) if attn_mask.dtype == torch.bool else scores + attn_mask
    probs = torch.softmax(scores, dim=-1)
    if dropout_p > 0.0:
        probs = F.dropout(probs, p=dropout_p)
    return torch.matmul(probs, v)


def sdpa_attention(q, k, v, *, attn_mask=None, is_causal=False, dropout_p=0.0, scale=None):
    return F.scaled_dot_product_attention(
        q, k, v, attn_mask=attn_mask, is_causal=is_causal, dropout_p=dropout_p, scale=scale
    )


def flash_attn_attention(q, k, v, *, attn_mask=None, is_causal=False, dropout_p=0.0, scale=None):
    if attn_mask is not None:
        # flash_attn_func has no arbitrary mask; padding needs flash_attn_varlen_func.
        raise KnobUnavailable("incompatible: flash_attn takes no attention mask (this model passes one)")
    out = _imports.flash_attn().flash_attn_func(
        q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), dropout_p=dropout_p, softmax_scale=scale, causal=is_causal
    )
    return out.transpose(1, 2)


def xformers_attention(q, k, v, *, attn_mask=None, is_causal=False, dropout_p=0.0, scale=None):
    ops = _imports.xformers_ops()
    bias = ops.LowerTriangularMask() if is_causal else attn_mask
    if is_causal and attn_mask is not None:
        raise KnobUnavailable("incompatible: xformers backend takes a causal or an explicit mask, not both")
    out = ops.memory_efficient_attention(
        q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), attn_bias=bias, p=dropout_p, scale=scale
    )
    return out.transpose(1, 2)


ATTENTION_FUNCTIONS: dict[str, AttentionFn] = {
    "eager": eager_attention,
    "sdpa": sdpa_attention,
    "sdpa_flash": sdpa_attention,
    "sdpa_efficient": sdpa_attention,
    "sdpa_cudnn": sdpa_attention,
    "sdpa_math": sdpa_attention,
    "flash_attn": flash_attn_attention,
    "xformers": xformers_attention,
}

SDPA_KERNELS: dict[str, str] = {
    "sdpa_flash": "FLASH_ATTENTION",
    "sdpa_efficient": "EFFICIENT_ATTENTION",
    "sdpa_cudnn": "CUDNN_ATTENTION",
    "sdpa_math": "MATH",
}


def attention_function(name: str) -> AttentionFn:
    """The attention callable for backend `name`; raises KnobUnavailable if its package is missing."""
    if name == "flash_attn":
        _imports.flash_attn()
    elif name == "xformers":
        _imports.xformers_ops()
    return ATTENTION_FUNCTIONS[name]


@contextlib.contextmanager
def pinned_kernel(name: str) -> Iterator[None]:
    """Allow only the SDPA kernel `name` asks for; SDPA then fails loudly if that kernel cannot run."""
    kernel = SDPA_KERNELS.get(name)
    if kernel is None:
        yield
        return
    from torch.nn.attention import SDPBackend, sdpa_kernel

    with sdpa_kernel([getattr(SDPBackend, kernel)]):
        yield
