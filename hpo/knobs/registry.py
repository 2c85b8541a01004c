"""Every systems-knob value, one spec each: the single place a knob value is defined.

A spec says what the value needs (device types, an optional package, a capability probe), how it is
applied (a builder named as "module:attr", imported only when used), how the evidence of a real
step recognises it (profiler op-name fragments, a dtype, an optimizer module) and, through its
needs, how `hpo doctor` reports it. The schema's allowed values (`hpo.knobs.values`), the doctor's
table, the attention and optimizer builders and the observation of what ran all read these tables,
so adding a value is adding one spec below (plus its builder or probe, if it brings new code). Its
spellings elsewhere come from the spec too: a precision's autocast dtype, mantissa (the probe's
rounding floor), Lightning string and transformers Trainer flag; an attention backend's
transformers `attn_implementation`.

This module imports no torch: `hpo validate` reads the allowed values from here and must start fast.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

__all__ = [
    "ATTENTION_SPECS",
    "COMPILE_SPECS",
    "KNOBS",
    "KNOB_DEFAULTS",
    "KNOB_NAMES",
    "LOADER_KNOBS",
    "LOADER_SPECS",
    "OPTIMIZER_SPECS",
    "PRECISION_SPECS",
    "AttentionSpec",
    "CompileSpec",
    "LoaderKnob",
    "LoaderSpec",
    "Needs",
    "OptimizerEvidence",
    "OptimizerSpec",
    "PrecisionSpec",
    "load",
    "spec_for",
]


@dataclass(frozen=True, kw_only=True)
class Needs:
    """What a knob value needs to run; `hpo doctor` checks these in this order."""

    package: str | None = None  # an optional package, by its name in `hpo.deps.OPTIONAL_PACKAGES`
    devices: tuple[str, ...] = ()  # the device types its kernels exist for; empty: any
    probe: str | None = None  # a function of `hpo.hardware.probes`: probe(*probe_args, device) -> Capability
    probe_args: tuple[str, ...] = ()


@dataclass(frozen=True, kw_only=True)
class PrecisionSpec:
    """A precision: the autocast dtype (a torch dtype's name), whether fp16 loss scaling is on."""

    name: str
    dtype: str  # torch dtype name; the dtype seen reaching matmul kernels is the evidence
    # Explicit mantissa bits of `dtype`: the rounding the probe emulates to measure a model's floor
    # (`hpo.verify.bounds`).
    mantissa_bits: int
    autocast: bool  # False: full precision, no autocast region at all
    scaled: bool = False  # a GradScaler scales the loss (fp16's narrow exponent range needs it)
    lightning: str  # Lightning's precision string for the same choice
    # transformers' TrainingArguments flag that turns it on ("bf16", "fp16"); None: no flag, fp32
    trainer_flag: str | None = None
    aliases: tuple[str, ...] = ()  # other spellings the schema accepts
    needs: Needs = field(default_factory=Needs)


@dataclass(frozen=True, kw_only=True)
class AttentionSpec:
    """An attention backend: the callable it uses and the profiler ops that prove its kernel ran."""

    name: str
    builder: str  # "module:attr" of the attention callable
    sdpa_kernel: str | None = None  # the SDPBackend member it is pinned to, for sdpa_<kernel>
    evidence_ops: tuple[str, ...] = ()  # profiler op-name fragments of its kernel
    # Exact op names that prove it only when no kernel's fragment matched (eager's plain softmax,
    # which SDPA's math kernel also calls)
    fallback_ops: tuple[str, ...] = ()
    # transformers' `attn_implementation` for it (SDPA's pinned kernels are all "sdpa": hpo pins the
    # kernel around each step); None: transformers has none
    transformers: str | None = None
    # True when `transformers` is an implementation hpo registers with transformers itself, so that
    # outside hpo (an exported config) it does not exist
    transformers_by_hpo: bool = False
    needs: Needs = field(default_factory=Needs)


@dataclass(frozen=True, kw_only=True)
class OptimizerEvidence:
    """How a step's evidence shows this optimizer path ran. Higher `rank` is tried first: the
    first value whose evidence is present is what ran; a value with no evidence is the fallback."""

    module_prefix: str | None = None  # the optimizer class's module starts with this
    ops: tuple[str, ...] = ()  # an op inside Optimizer.step contains one of these
    except_ops: tuple[str, ...] = ()  # ...unless it is one of these (shared with other paths)
    rank: int = 0


@dataclass(frozen=True, kw_only=True)
class OptimizerSpec:
    """An AdamW implementation: its builder, and the torch constructor flags that select it."""

    name: str
    builder: str  # "module:attr": builder(params, *, lr, weight_decay, **torch_flags)
    torch_flags: tuple[tuple[str, bool], ...] | None = None  # None: not a torch path (own class)
    evidence: OptimizerEvidence = field(default_factory=OptimizerEvidence)
    needs: Needs = field(default_factory=Needs)


@dataclass(frozen=True, kw_only=True)
class CompileSpec:
    """A torch.compile mode (`compile: false` is the knob off, not a mode)."""

    name: str


@dataclass(frozen=True, kw_only=True)
class LoaderSpec:
    """An input-pipeline backend (`systems.loader`): what builds a trial's batches from a workload's dataset."""

    name: str
    needs: Needs = field(default_factory=Needs)


@dataclass(frozen=True, kw_only=True)
class LoaderKnob:
    """A DataLoader setting searched like a knob (`systems.<name>`). What it means and what proves it
    ran are in `hpo.engine.loader`; here: its default and what it needs to apply at all."""

    name: str
    default: Any
    needs_workers: bool = False  # only a loader with worker processes has it: with num_workers 0 it is refused
    applies_on: tuple[str, ...] = ()  # device types it does anything on; elsewhere recorded as not observed (null)


S = TypeVar("S")


def _by_name(*specs: S) -> dict[str, S]:
    return {spec.name: spec for spec in specs}  # type: ignore[attr-defined]


PRECISION_SPECS: dict[str, PrecisionSpec] = _by_name(
    PrecisionSpec(name="fp32", dtype="float32", mantissa_bits=23, autocast=False, lightning="32-true", aliases=("none", "float32")),
    PrecisionSpec(
        name="bf16", dtype="bfloat16", mantissa_bits=7, autocast=True, lightning="bf16-mixed", trainer_flag="bf16",
        aliases=("bfloat16",),
        needs=Needs(probe="bf16_supported"),
    ),
    PrecisionSpec(
        name="fp16", dtype="float16", mantissa_bits=10, autocast=True, scaled=True, lightning="16-mixed",
        trainer_flag="fp16", aliases=("float16",),
        needs=Needs(probe="fp16_supported"),
    ),
)  # fmt: skip

_ATT = "hpo.knobs.attention_kernels:"


def _sdpa(name: str, kernel: str, op: str) -> AttentionSpec:
    """SDPA pinned to one kernel: it fails loudly where that kernel cannot run."""
    return AttentionSpec(
        name=name, builder=_ATT + "sdpa_attention", sdpa_kernel=kernel, evidence_ops=(op,), transformers="sdpa",
        needs=Needs(probe="sdpa_kernel_usable", probe_args=(kernel,)),
    )  # fmt: skip


ATTENTION_SPECS: dict[str, AttentionSpec] = _by_name(
    # eager: torch.softmax's exact ops, never aten::log_softmax (the loss, in every step)
    AttentionSpec(
        name="eager", builder=_ATT + "eager_attention", fallback_ops=("aten::softmax", "aten::_softmax"), transformers="eager",
    ),
    AttentionSpec(name="sdpa", builder=_ATT + "sdpa_attention", transformers="sdpa"),  # evidence: any sdpa_<kernel>'s
    _sdpa("sdpa_flash", "FLASH_ATTENTION", "_scaled_dot_product_flash_attention"),
    _sdpa("sdpa_efficient", "EFFICIENT_ATTENTION", "_scaled_dot_product_efficient_attention"),
    _sdpa("sdpa_cudnn", "CUDNN_ATTENTION", "_scaled_dot_product_cudnn_attention"),
    _sdpa("sdpa_math", "MATH", "_scaled_dot_product_attention_math"),
    # flash-attn 2.7+ registers torch.library ops flash_attn::_flash_attn_forward/_backward
    # (flash_attn/flash_attn_interface.py); `flash_attn::` does not match FA3's `flash_attn_3::fwd`.
    AttentionSpec(
        name="flash_attn", builder=_ATT + "flash_attn_attention", evidence_ops=("flash_attn::",),
        transformers="flash_attention_2",
        needs=Needs(package="flash_attn", devices=("cuda",), probe="flash_attn_arch_supported"),
    ),
    AttentionSpec(
        # xformers v0.0.35 fmha/__init__.py: every path runs inside the autograd Function _fMHA, whose
        # class name the profiler records; its FA2/FA3 paths add xformers_flash::/xformers_flash3:: ops.
        # Not aten::_efficient_attention_forward: SDPA's efficient kernel calls it too.
        name="xformers", builder=_ATT + "xformers_attention", evidence_ops=("_fMHA", "xformers_flash"),
        transformers="hpo_xformers", transformers_by_hpo=True,  # hpo.workloads.text_classification registers it
        needs=Needs(package="xformers", devices=("cuda",)),
    ),
)  # fmt: skip

_OPT = "hpo.knobs.adamw_builders:"

OPTIMIZER_SPECS: dict[str, OptimizerSpec] = _by_name(
    OptimizerSpec(name="forloop", builder=_OPT + "torch_adamw", torch_flags=(("foreach", False), ("fused", False))),
    OptimizerSpec(
        name="foreach", builder=_OPT + "torch_adamw", torch_flags=(("foreach", True), ("fused", False)),
        # fused AdamW also bumps its step counters with _foreach_add_
        evidence=OptimizerEvidence(ops=("aten::_foreach_",), except_ops=("aten::_foreach_add_",)),
    ),
    OptimizerSpec(
        name="fused", builder=_OPT + "torch_adamw", torch_flags=(("foreach", False), ("fused", True)),
        evidence=OptimizerEvidence(ops=("_fused_adam",), rank=1), needs=Needs(probe="fused_adamw_runs"),
    ),
    OptimizerSpec(
        name="apex", builder=_OPT + "apex_fused_adam",
        evidence=OptimizerEvidence(module_prefix="apex.", rank=2),  # the class itself is the proof
        needs=Needs(package="apex", devices=("cuda",)),
    ),
)  # fmt: skip

COMPILE_SPECS: dict[str, CompileSpec] = _by_name(
    CompileSpec(name="default"), CompileSpec(name="reduce-overhead"), CompileSpec(name="max-autotune")
)

LOADER_SPECS: dict[str, LoaderSpec] = _by_name(
    LoaderSpec(name="torch"),
    # No DALI pipeline is built: the value exists so that a space naming it is refused before the
    # first trial where it cannot run, and at its trial everywhere else.
    LoaderSpec(name="dali", needs=Needs(package="nvidia_dali", devices=("cuda",))),
)

# The input-pipeline settings, in the order configs and records list them (hpo.engine.loader).
LOADER_KNOBS: dict[str, LoaderKnob] = _by_name(
    LoaderKnob(name="loader", default="torch"),
    LoaderKnob(name="num_workers", default=0),
    LoaderKnob(name="pin_memory", default=False, applies_on=("cuda",)),
    LoaderKnob(name="prefetch_factor", default=None, needs_workers=True),
    LoaderKnob(name="persistent_workers", default=False, needs_workers=True),
)

# The five knobs, in the order configs, exports and records list them. grad_checkpointing is a bool.
KNOBS: dict[str, Mapping[str, Any] | None] = {
    "precision": PRECISION_SPECS,
    "attention": ATTENTION_SPECS,
    "optimizer": OPTIMIZER_SPECS,
    "grad_checkpointing": None,
    "compile": COMPILE_SPECS,
}
KNOB_NAMES: tuple[str, ...] = tuple(KNOBS)
# Each knob's value where a file names none: the schema's default and a trial's `Knobs` both read it.
KNOB_DEFAULTS: dict[str, Any] = {
    "precision": "fp32",
    "attention": "sdpa",
    "optimizer": "fused",
    "grad_checkpointing": False,
    "compile": False,
}


def spec_for(knob: str, value: str) -> Any:
    """The spec of `value` for `knob`; an unknown value raises an error naming the valid ones."""
    table = LOADER_SPECS if knob == "loader" else KNOBS.get(knob)
    if table is None:
        raise KeyError(f"knob must be one of {[k for k, t in KNOBS.items() if t]}, got {knob!r}")
    if value not in table:
        raise KeyError(f"{knob} must be one of {list(table)}, got {value!r}")
    return table[value]


def load(ref: str) -> Any:
    """Import what a "module:attr" builder reference names (the import is deferred to first use)."""
    module, _, attr = ref.partition(":")
    return getattr(importlib.import_module(module), attr)
