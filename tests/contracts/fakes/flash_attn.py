"""A CPU reference of flash-attention 2.7-2.8's public entry point, with its real signature, checks
and profiler names: flash_attn/flash_attn_interface.py (v2.8.3.post1) registers the torch.library custom
ops flash_attn::_flash_attn_forward/_backward and runs them under the autograd Function FlashAttnFunc;
csrc/flash_attn/flash_api.cpp refuses every dtype but fp16 and bf16 with the message below.
The math is plain softmax attention computed in fp32, returned in the input dtype."""

from __future__ import annotations

import torch

__version__ = "2.8.3.post1"

DTYPE_MESSAGE = "FlashAttention only support fp16 and bf16 data type"  # flash_api.cpp mha_fwd (v2.8.3.post1)


def _probs(q, k, softmax_scale: float, causal: bool) -> torch.Tensor:
    """Attention probabilities (b, h, s_q, s_k) in fp32, from q, k of shape (b, s, h, d)."""
    scores = q.float().transpose(1, 2) @ k.float().transpose(1, 2).transpose(-2, -1) * softmax_scale
    if causal:
        s_q, s_k = scores.shape[-2:]
        scores = scores.masked_fill(~torch.ones(s_q, s_k, dtype=torch.bool).tril(s_k - s_q), float("-inf"))
    return scores.softmax(-1)


def _attention(q, k, v, softmax_scale: float, causal: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """(b, s, h, d) in, (b, s, h, d) out, and the logsumexp (b, h, s) flash-attn returns with it."""
    probs = _probs(q, k, softmax_scale, causal)
    out = probs @ v.float().transpose(1, 2)
    return out.transpose(1, 2).to(q.dtype), probs.amax(-1)


@torch.library.custom_op("flash_attn::_flash_attn_forward", mutates_args=(), device_types=None)
def _flash_attn_forward(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, dropout_p: float, softmax_scale: float, causal: bool
) -> tuple[torch.Tensor, torch.Tensor]:
    if q.dtype not in (torch.float16, torch.bfloat16):
        raise RuntimeError(DTYPE_MESSAGE)
    if k.dtype != q.dtype or v.dtype != q.dtype:
        raise RuntimeError("query and key must have the same dtype")
    if dropout_p:
        raise NotImplementedError("the CPU reference of flash_attn_func runs without dropout")
    return _attention(q, k, v, softmax_scale, causal)


@torch.library.custom_op("flash_attn::_flash_attn_backward", mutates_args=(), device_types=None)
def _flash_attn_backward(
    dout: torch.Tensor, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, softmax_scale: float, causal: bool
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    # Inside a custom op autograd does not record: the attention backward, written out.
    probs = _probs(q, k, softmax_scale, causal)  # (b, h, s_q, s_k)
    qf, kf, vf, do = (t.float().transpose(1, 2) for t in (q, k, v, dout))
    dv = probs.transpose(-2, -1) @ do
    dp = do @ vf.transpose(-2, -1)
    ds = probs * (dp - (dp * probs).sum(-1, keepdim=True))
    dq, dk = ds @ kf * softmax_scale, ds.transpose(-2, -1) @ qf * softmax_scale
    return tuple(g.transpose(1, 2).to(t.dtype) for g, t in ((dq, q), (dk, k), (dv, v)))


class FlashAttnFunc(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, dropout_p, softmax_scale, causal):
        out, _ = torch.ops.flash_attn._flash_attn_forward(q, k, v, dropout_p, softmax_scale, causal)
        ctx.save_for_backward(q, k, v)
        ctx.softmax_scale, ctx.causal = softmax_scale, causal
        return out

    @staticmethod
    def backward(ctx, dout):
        q, k, v = ctx.saved_tensors
        dq, dk, dv = torch.ops.flash_attn._flash_attn_backward(dout, q, k, v, ctx.softmax_scale, ctx.causal)
        return dq, dk, dv, None, None, None


def flash_attn_func(
    q,
    k,
    v,
    dropout_p=0.0,
    softmax_scale=None,
    causal=False,
    window_size=(-1, -1),
    softcap=0.0,
    alibi_slopes=None,
    deterministic=False,
    return_attn_probs=False,
):
    """flash_attn_interface.flash_attn_func (v2.8.3.post1): q, k, v of shape (batch, seqlen, nheads, headdim)."""
    if q.dim() != 4:
        raise RuntimeError("q must have shape (batch_size, seqlen_q, num_heads, head_size)")
    if softmax_scale is None:
        softmax_scale = q.shape[-1] ** (-0.5)
    return FlashAttnFunc.apply(q, k, v, float(dropout_p), float(softmax_scale), bool(causal))
