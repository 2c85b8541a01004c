"""A CPU reference of xformers v0.0.35's `xformers.ops.memory_efficient_attention`, with its real
signature and checks: fmha/__init__.py dispatches through the autograd Function `_fMHA` (the name
the profiler records); inputs are BMHK (batch, seqlen, heads, head_dim); `LowerTriangularMask` is
the causal bias (fmha/attn_bias.py); a tensor bias's strides must be multiples of 8 for 16-bit
dtypes (fmha/cutlass.py and fmha/ck.py _check_bias_alignment, called from their FwOp and BwOp
not_supported_reasons), else the dispatcher raises NotImplementedError
"No operator found for `memory_efficient_attention_forward` ..." (fmha/dispatch.py)."""

from __future__ import annotations

import torch

__version__ = "0.0.35"


class AttentionBias:
    """fmha/attn_bias.py AttentionBias: a bias given by its structure, not by a tensor."""


class LowerTriangularMask(AttentionBias):
    def materialize(self, shape, dtype=torch.float32, device="cpu") -> torch.Tensor:
        ones = torch.ones(shape[-2:], dtype=torch.bool, device=device)
        return torch.zeros(shape[-2:], dtype=dtype, device=device).masked_fill(~ones.tril(), float("-inf"))


def _not_supported_reasons(query: torch.Tensor, attn_bias) -> list[str]:
    reasons = []
    if query.dim() != 4:
        reasons.append(f"query.dim() == {query.dim()}: expected BMHK (batch, seqlen, heads, head_dim)")
    if isinstance(attn_bias, torch.Tensor):
        alignment = 128 // torch.finfo(attn_bias.dtype).bits
        for d in range(attn_bias.ndim - 1):
            if attn_bias.stride(d) % alignment != 0:
                reasons.append(f"attn_bias.stride(-2) % {alignment} != 0 (attn_bias.stride() = {attn_bias.stride()})")
        if attn_bias.stride(-1) > 1:
            reasons.append(f"attn_bias.stride(-1) > 1 (attn_bias.stride() = {attn_bias.stride()})")
    elif attn_bias is not None and not isinstance(attn_bias, LowerTriangularMask):
        reasons.append(f"attn_bias type is {type(attn_bias)}")
    return reasons


def _bias(attn_bias, shape, dtype) -> torch.Tensor | None:
    if attn_bias is None:
        return None
    if isinstance(attn_bias, LowerTriangularMask):
        return attn_bias.materialize(shape, dtype=dtype)
    return attn_bias.to(dtype)


class _fMHA(torch.autograd.Function):
    @staticmethod
    def forward(ctx, query, key, value, attn_bias, p, scale):
        with torch.enable_grad():
            leaves = [t.detach().requires_grad_() for t in (query, key, value)]
            q, k, v = (t.float().transpose(1, 2) for t in leaves)
            scores = q @ k.transpose(-2, -1) * scale
            bias = _bias(attn_bias, scores.shape, scores.dtype)
            if bias is not None:
                scores = scores + bias
            out = (scores.softmax(-1) @ v).transpose(1, 2).to(query.dtype)
        ctx.graph = (leaves, out)
        return out.detach()

    @staticmethod
    def backward(ctx, grad):
        leaves, out = ctx.graph
        dq, dk, dv = torch.autograd.grad(out, leaves, grad)
        return dq, dk, dv, None, None, None


def memory_efficient_attention(query, key, value, attn_bias=None, p=0.0, scale=None, *, op=None, output_dtype=None):
    """fmha/__init__.py memory_efficient_attention (v0.0.35): BMHK in, BMHK out."""
    reasons = _not_supported_reasons(query, attn_bias)
    if reasons:
        detail = "\n".join(f"    {r}" for r in reasons)
        raise NotImplementedError(
            f"No operator found for `memory_efficient_attention_forward` with inputs:\n"
            f"     query       : shape={tuple(query.shape)} ({query.dtype})\n"
            f"`cutlassF-pt` is not supported because:\n{detail}"
        )
    if p:
        raise NotImplementedError("the CPU reference of memory_efficient_attention runs without dropout")
    scale = query.shape[-1] ** -0.5 if scale is None else scale
    return _fMHA.apply(query, key, value, attn_bias, p, scale)
