"""Turn what was seen during one training step into `knobs_observed`, and compare it with the request.

Sources: the dtypes reaching matmul kernels (dispatcher, or compiled graphs' metadata), the aten ops
in torch.profiler (attention kernel, optimizer path), block forward counts (recomputation), and the
graphs the compile backend received. Nothing here reads the requested knobs to decide what ran.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field

from hpo.config import Knobs
from hpo.knobs.compile import GraphRecord

DTYPE_NAMES = {"float32": "fp32", "bfloat16": "bf16", "float16": "fp16"}

# Profiler op-name fragment -> the attention backend it proves ran. Order matters: specific first.
ATTENTION_KERNEL_OPS = (
    ("_scaled_dot_product_flash_attention", "sdpa_flash"),
    ("_scaled_dot_product_efficient_attention", "sdpa_efficient"),
    ("_scaled_dot_product_cudnn_attention", "sdpa_cudnn"),
    ("_scaled_dot_product_attention_math", "sdpa_math"),
    ("flash_attn", "flash_attn"),
    ("xformers", "xformers"),
    ("efficient_attention_forward", "xformers"),
)


@dataclass
class StepEvidence:
    matmul_dtypes: Counter = field(default_factory=Counter)  # linear/conv layers
    attention_dtypes: Counter = field(default_factory=Counter)  # attention's own matmuls
    profiler_ops: set[str] = field(default_factory=set)
    optimizer_ops: set[str] = field(default_factory=set)  # ops inside Optimizer.step only
    recompute_in_step: int = 0
    graphs: GraphRecord = field(default_factory=GraphRecord)
    optimizer_module: str = ""
    grad_scaler_scale: float | None = None


def observed_knobs(ev: StepEvidence) -> dict:
    return {
        "precision": _precision(ev.graphs.matmul_dtypes if ev.graphs.graphs else ev.matmul_dtypes),
        "attention_dtype": _precision(ev.attention_dtypes),
        "attention": _attention(ev.profiler_ops, ev.graphs),
        "optimizer": _optimizer(ev.optimizer_ops, ev.optimizer_module),
        "grad_checkpointing": ev.recompute_in_step > 0 or ev.graphs.checkpoint_regions > 0,
        "compile": ev.graphs.graphs > 0,
        "compiled_graphs": ev.graphs.graphs,
        "grad_scaler": ev.grad_scaler_scale is not None,
    }


def _precision(dtypes: Counter) -> str:
    names = sorted({DTYPE_NAMES.get(d, d) for d in dtypes})
    if not names:
        return "unknown"
    return names[0] if len(names) == 1 else "mixed(" + "+".join(names) + ")"


def _attention(ops: Iterable[str], graphs: GraphRecord) -> str:
    seen = sorted({backend for op in ops for frag, backend in ATTENTION_KERNEL_OPS if frag in op})
    if seen:
        return "+".join(seen)
    if graphs.sdpa_nodes:
        # The graph calls SDPA yet no fused SDPA kernel ran: it was lowered to its math decomposition.
        return "sdpa_math"
    softmax = any(op.endswith("softmax") for op in ops) or graphs.softmax_nodes > 0
    return "eager" if softmax else "none"


def _optimizer(ops: Iterable[str], optimizer_module: str) -> str:
    ops = set(ops)
    if optimizer_module.startswith("apex."):
        return "apex"
    if any("_fused_adam" in op for op in ops):
        return "fused"
    if any(op.startswith("aten::_foreach_") and op != "aten::_foreach_add_" for op in ops):
        return "foreach"  # fused AdamW also bumps step counters with _foreach_add_
    return "forloop"


def mismatches(requested: Knobs, observed: dict) -> list[str]:
    """Each knob that the evidence shows did not run as requested, as 'knob: asked X, ran Y'."""
    problems = []
    want_precision = requested.precision
    if observed["precision"] != want_precision:
        problems.append(f"precision: asked {want_precision}, ran {observed['precision']}")
    att = observed["attention"]
    if att != "none" and not _attention_matches(requested.attention, att):
        problems.append(f"attention: asked {requested.attention}, ran {att}")
    if observed["optimizer"] != requested.optimizer:
        problems.append(f"optimizer: asked {requested.optimizer}, ran {observed['optimizer']}")
    if observed["grad_checkpointing"] != requested.grad_checkpointing:
        problems.append(
            f"grad_checkpointing: asked {requested.grad_checkpointing}, ran {observed['grad_checkpointing']}"
        )
    if observed["compile"] != bool(requested.compile):
        problems.append(f"compile: asked {requested.compile}, compiled graphs: {observed['compile']}")
    if observed["grad_scaler"] != (requested.precision == "fp16"):
        problems.append(f"grad_scaler: expected only with fp16, ran {observed['grad_scaler']}")
    return problems


def _attention_matches(asked: str, ran: str) -> bool:
    kernels = set(ran.split("+"))
    if asked == "sdpa":
        return all(k.startswith("sdpa_") for k in kernels)
    return kernels == {asked}
