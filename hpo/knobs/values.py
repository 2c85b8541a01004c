"""The allowed values of the five systems knobs: the one source the schema, the registries and the
probes agree on (a test checks that each registry's keys match these)."""

from typing import Literal, get_args

Precision = Literal["fp32", "bf16", "fp16"]
Attention = Literal[
    "eager", "sdpa", "sdpa_flash", "sdpa_efficient", "sdpa_cudnn", "sdpa_math", "flash_attn", "xformers"
]
OptimizerImpl = Literal["forloop", "foreach", "fused", "apex"]
CompileMode = Literal["default", "reduce-overhead", "max-autotune"]

PRECISIONS: tuple[str, ...] = get_args(Precision)
ATTENTIONS: tuple[str, ...] = get_args(Attention)
OPTIMIZER_IMPLS: tuple[str, ...] = get_args(OptimizerImpl)
COMPILE_MODES: tuple[str, ...] = get_args(CompileMode)

PRECISION_ALIASES = {"none": "fp32", "float32": "fp32", "bfloat16": "bf16", "float16": "fp16"}
KNOB_NAMES = ("precision", "attention", "optimizer", "grad_checkpointing", "compile")
