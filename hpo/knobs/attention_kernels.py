"""Attention backends by name. Every backend computes softmax(q k^T * scale + mask) v on tensors of
shape (batch, heads, seq, head_dim); they differ only in the kernel that runs.

`sdpa_<kernel>` backends call torch SDPA and are pinned to one kernel by `pinned_kernel()`, which the
knob's hook (`ATTENTION_HOOK`) keeps in force around each step, so that SDPA raises instead of
quietly choosing another kernel.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable, Iterator

import torch
import torch.nn.functional as F

from hpo import deps
from hpo.errors import KnobUnavailable
from hpo.knobs.model_hooks import ModelHook
from hpo.knobs.registry import ATTENTION_SPECS, load, spec_for

AttentionFn = Callable[..., torch.Tensor]


_CAUSAL_MASKS: dict[tuple[int, int, torch.device], torch.Tensor] = {}


def causal_mask(q_len: int, k_len: int, device: torch.device) -> torch.Tensor:
    """Boolean lower-triangular mask, built once per (lengths, device) and reused by every eager call.
    While Dynamo traces, it is built in the graph instead: filling the cache is a side effect
    Dynamo cannot trace inside a checkpointed region (torch 2.13 "HOP: Unsafe side effect"), and
    the model would fall back to eager; in the graph the mask costs one fused tril."""
    if torch.compiler.is_compiling():
        return torch.ones(q_len, k_len, dtype=torch.bool, device=device).tril()
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
    return F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask, is_causal=is_causal, dropout_p=dropout_p, scale=scale)


def flash_attn_attention(q, k, v, *, attn_mask=None, is_causal=False, dropout_p=0.0, scale=None):
    if attn_mask is not None:
        # flash_attn_func has no arbitrary mask; padding needs flash_attn_varlen_func.
        raise KnobUnavailable("flash_attn takes no attention mask (this model passes one)", [("attention", "flash_attn")])
    out = deps.flash_attn().flash_attn_func(
        q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), dropout_p=dropout_p, softmax_scale=scale, causal=is_causal
    )
    return out.transpose(1, 2)


def xformers_attention(q, k, v, *, attn_mask=None, is_causal=False, dropout_p=0.0, scale=None):
    ops = deps.xformers_ops()
    if is_causal and attn_mask is not None:
        raise KnobUnavailable("xformers backend takes a causal or an explicit mask, not both", [("attention", "xformers")])
    bias = ops.LowerTriangularMask() if is_causal else None if attn_mask is None else xformers_bias(attn_mask, q, k)
    out = ops.memory_efficient_attention(
        q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), attn_bias=bias, p=dropout_p, scale=scale
    )
    return out.transpose(1, 2)


def xformers_bias(attn_mask: torch.Tensor, q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
    """An SDPA-style mask (boolean keep-mask or additive) as the bias xformers takes: additive, in
    the query's dtype, of shape (batch, heads, q_len, k_len), its strides multiples of 8 (xformers
    v0.0.35 fmha/common.py _check_bias_alignment refuses others for 16-bit dtypes; a boolean tensor
    has no finfo at all). Allocated wider and sliced, as xformers' own hint does."""
    (b, h, s_q, _), s_k = q.shape, k.size(-2)
    if attn_mask.dtype == torch.bool:
        attn_mask = torch.zeros(attn_mask.shape, dtype=q.dtype, device=q.device).masked_fill(~attn_mask, float("-inf"))
    padded = torch.empty(b, h, s_q, -(-s_k // 8) * 8, dtype=q.dtype, device=q.device)[..., :s_k]
    padded.copy_(attn_mask.to(q.dtype).expand(b, h, s_q, s_k))
    return padded


# Derived from hpo.knobs.registry.ATTENTION_SPECS, where a backend is added.
SDPA_KERNELS: dict[str, str] = {name: spec.sdpa_kernel for name, spec in ATTENTION_SPECS.items() if spec.sdpa_kernel}


def attention_function(name: str) -> AttentionFn:
    """The attention callable for backend `name`; raises KnobUnavailable if its package is missing."""
    spec = spec_for("attention", name)
    if spec.needs.package:
        deps.require(spec.needs.package)
    return load(spec.builder)


@contextlib.contextmanager
def pinned_kernel(name: str) -> Iterator[None]:
    """Allow only the SDPA kernel `name` asks for; SDPA then fails loudly if that kernel cannot run."""
    spec = ATTENTION_SPECS.get(name)
    kernel = spec.sdpa_kernel if spec is not None else None
    if kernel is None:
        yield
        return
    from torch.nn.attention import SDPBackend, sdpa_kernel

    with sdpa_kernel([getattr(SDPBackend, kernel)]):
        yield


class AttentionHook(ModelHook):
    """`systems.attention` applied: the workload builds its attention layers with the kernel the
    value names (`build_model(attention=...)`), and an SDPA kernel is pinned around every step."""

    def build_kwargs(self, value: str) -> dict[str, str]:
        return {"attention": value}

    def around_step(self, value: str, device_type: str) -> contextlib.AbstractContextManager:
        return pinned_kernel(value)


ATTENTION_HOOK = AttentionHook()
