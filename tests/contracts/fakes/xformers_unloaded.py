"""xformers v0.0.35 installed for another torch, as it was on the H200 (built for 2.10.0+cu128, run
on 2.11.0+cu130, ../shared/gpu/2026-11-26-h200/xformers-info.txt): `import xformers.ops` works,
and every call of `memory_efficient_attention` raises.

Why, in v0.0.35's source: xformers/_cpp_lib.py catches the failed `torch.ops.load_library` of its
C++ extension and only logs "WARNING[XFORMERS]: xFormers can't load C++/CUDA extensions", leaving
`_build_metadata` None, so `_built_with_cuda` is False. Every operator's `not_supported_reasons`
(xformers/ops/fmha/common.py AttentionOpBase) then adds "xFormers wasn't build with CUDA support"
for a CUDA tensor, and fa3 adds "operator wasn't built" (its extension is absent). The dispatcher
(xformers/ops/fmha/dispatch.py `_dispatch_fw` -> `_run_priority_list`) finds no operator in the
CUDA priority list [fa3F, fa2F, cutlassF] and raises NotImplementedError with the message built
below, line for line: the inputs (`_format_inputs_description`, indented by five spaces), then one
block per operator (`_format_not_supported_reasons`). With inputs that need a gradient, the forward
goes through `_memory_efficient_attention_forward_requires_grad`, the same dispatcher.

The structural parts (AttentionBias, LowerTriangularMask) are the working fake's.
"""

from __future__ import annotations

import textwrap

from contracts.fakes.xformers_ops import AttentionBias, LowerTriangularMask  # noqa: F401 - xformers.ops exports them

__version__ = "0.0.35"

# The CUDA priority list's forward operators and their NAMEs (flash3.py, flash.py, cutlass.py at
# v0.0.35; versions as xformers.info printed them on the H200), each with the reasons it gave there.
OPERATORS = (
    (
        "fa3F@0.0.0",
        ["xFormers wasn't build with CUDA support", "operator wasn't built - see `python -m xformers.info` for more info"],
    ),
    ("fa2F@2.5.7-pt", ["xFormers wasn't build with CUDA support"]),
    ("cutlassF-pt", ["xFormers wasn't build with CUDA support"]),
)


def _format_inputs_description(query, key, value, attn_bias, p) -> str:
    return f"""query       : shape={tuple(query.shape)} ({query.dtype})
key         : shape={tuple(key.shape)} ({key.dtype})
value       : shape={tuple(value.shape)} ({value.dtype})
attn_bias   : {type(attn_bias)}
p           : {p}"""


def _format_not_supported_reasons(name: str, reasons: list[str]) -> str:
    return f"`{name}` is not supported because:\n    " + "\n    ".join(reasons)


def memory_efficient_attention(query, key, value, attn_bias=None, p=0.0, scale=None, *, op=None, output_dtype=None):
    """fmha/__init__.py memory_efficient_attention (v0.0.35) with no loadable operator."""
    msg = f"""No operator found for `memory_efficient_attention_forward` with inputs:
{textwrap.indent(_format_inputs_description(query, key, value, attn_bias, p), "     ")}"""
    for name, reasons in OPERATORS:
        msg += "\n" + _format_not_supported_reasons(name, reasons)
    raise NotImplementedError(msg)
