"""`systems.attention`: the attention kernel, eager, SDPA (its own choice, or pinned to one kernel),
or the flash-attn and xformers packages.

Applied by its hook, `hpo.knobs.attention_kernels.AttentionHook`: when the model is built
(`workload.build_model(attention=...)`, whose layers call `attention_function`) and around each step
(an SDPA kernel is pinned).
Observed from the profiler: each backend's kernel ops, or, for eager, its exact softmax ops when no
kernel's op ran (SDPA's math kernel calls the same softmax)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from hpo.knobs.knob import HfPart, Knob, LightningPart, LoopPart, Needs, by_name
from hpo.knobs.systems.precision import observed_precisions, one_or_mixed

__all__ = ["ATTENTION_SPECS", "HF_ATTN", "KNOB", "AttentionSpec", "attention_note"]


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


_ATT = "hpo.knobs.attention_kernels:"


def _sdpa(name: str, kernel: str, op: str) -> AttentionSpec:
    """SDPA pinned to one kernel: it fails loudly where that kernel cannot run."""
    return AttentionSpec(
        name=name, builder=_ATT + "sdpa_attention", sdpa_kernel=kernel, evidence_ops=(op,), transformers="sdpa",
        needs=Needs(probe="sdpa_kernel_usable", probe_args=(kernel,)),
    )  # fmt: skip


ATTENTION_SPECS: dict[str, AttentionSpec] = by_name(
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

# hpo attention value -> transformers attn_implementation, for the values transformers itself knows
# (not one hpo registers with it at run time, which an exported config cannot name).
HF_ATTN = {
    name: spec.transformers for name, spec in ATTENTION_SPECS.items() if spec.transformers and not spec.transformers_by_hpo
}


def _attention_ran(ops: set[str], graphs: Any) -> str | None:
    """The attention kernels the step shows, from the specs' evidence. A kernel hpo does not know
    reads as None (not observed), never as eager: eager is proven by its own exact softmax ops, and
    only when no kernel's op ran."""
    seen = sorted({name for op in ops for name, spec in ATTENTION_SPECS.items() for frag in spec.evidence_ops if frag in op})
    if seen:
        return "+".join(seen)
    if graphs.sdpa_nodes:
        # The graph calls SDPA yet no fused SDPA kernel ran: it was lowered to its math decomposition.
        return "sdpa_math"
    fallback = sorted(name for name, spec in ATTENTION_SPECS.items() if ops.intersection(spec.fallback_ops))
    if not fallback and graphs.softmax_nodes > 0:  # a compiled graph's softmax node: eager attention
        fallback = [name for name, spec in ATTENTION_SPECS.items() if "aten::softmax" in spec.fallback_ops]
    return "+".join(fallback) or None  # no attention kernel and no softmax: not observed


def attention_note(w: Any) -> str:
    """How to get the trial's attention when the export cannot set it: attn_implementation only for
    a transformers model; hpo's own attention layers take it from `attention_function`."""
    attention = w.knobs["attention"]
    own = f"its attention layers call hpo.knobs.attention_kernels.attention_function({attention!r})"
    name = w.workload.get("name")
    if w.transformers_model is False:
        return f"# attention={attention}: workload {name} builds no transformers model (no attn_implementation); {own}"
    return (
        f"# attention={attention}: hpo cannot tell whether {name} builds a transformers model: if it does, load it "
        f"with attn_implementation={HF_ATTN[attention]!r}; if not, {own}"
    )


class Attention(Knob):
    name = "attention"
    help = "the attention kernel: eager, SDPA (pinned to one kernel or its own choice), flash_attn, xformers"
    position = 20
    applies_to = "model"
    hook = "hpo.knobs.attention_kernels:ATTENTION_HOOK"
    specs = ATTENTION_SPECS
    default = "sdpa"
    reference = "eager"
    value_type = str
    observed_fields = {
        "attention": (str | None, ...),  # several kernels: their names joined by "+"
        "attention_dtype": (str | None, ...),  # the dtype attention's own matmuls ran in
        "attentions": (list[str] | None, None),  # every kernel seen, as a list (absent from older records)
    }

    @property
    def values(self) -> tuple:  # type: ignore[override]
        """Every value with a spec: a spec added to ATTENTION_SPECS is an allowed value."""
        return (*ATTENTION_SPECS,)

    def observe(self, evidence: Any) -> dict[str, Any]:
        ran = _attention_ran(set(evidence.profiler_ops), evidence.graphs)
        return {
            "attention": ran,
            "attention_dtype": one_or_mixed(observed_precisions(evidence.attention_dtypes)),
            "attentions": [] if ran is None else ran.split("+"),
        }

    def mismatches(self, asked: Any, observed: dict[str, Any], knobs: Any) -> list:
        ran = observed.get("attention")
        if ran is None or _matches(asked, ran):
            return []
        return super().mismatches(asked, observed, knobs)

    def refused_export(self, value: Any) -> str | None:
        if "+" in value:
            return f"it ran more than one kernel (attention={value}); no single setting reproduces it"
        if value not in HF_ATTN:
            return f"attention={value} has no attn_implementation in transformers (hpo registers its own kernel for it); known: {sorted(HF_ATTN)}"
        return None

    def sdpa_kernel(self, value: str) -> str | None:
        spec = ATTENTION_SPECS.get(value)
        return spec.sdpa_kernel if spec is not None else None

    def python_loop(self, w: Any) -> LoopPart:
        attention, kernel = w.knobs["attention"], self.sdpa_kernel(w.knobs["attention"])
        setup = (
            [f"# attention: load the model with attn_implementation={HF_ATTN[attention]!r}"]
            if w.transformers_model
            else [attention_note(w)]
        )
        return LoopPart(setup=setup, contexts=[f"sdpa_kernel(SDPBackend.{kernel})"] if kernel else [])

    def hf(self, w: Any) -> HfPart:
        attention, kernel = w.knobs["attention"], self.sdpa_kernel(w.knobs["attention"])
        part = (
            HfPart(model={"attn_implementation": HF_ATTN[attention]})
            if w.transformers_model
            else HfPart(notes=[attention_note(w)])
        )
        if kernel:
            part.notes.append(
                f"# attention={attention}: the Trainer cannot pin an SDPA kernel; run trainer.train() inside "
                f"torch.nn.attention.sdpa_kernel(SDPBackend.{kernel})"
            )
        return part

    def lightning(self, w: Any) -> LightningPart:
        attention, kernel = w.knobs["attention"], self.sdpa_kernel(w.knobs["attention"])
        note = (
            f"# attention={attention}: Lightning has no attention setting; build the model with attn_implementation={HF_ATTN[attention]!r}"
            if w.transformers_model
            else attention_note(w)
        )
        part = LightningPart(notes=[note])
        if kernel:
            part.notes.append(
                f"# Lightning cannot pin an SDPA kernel: wrap trainer.fit() in torch.nn.attention.sdpa_kernel(SDPBackend.{kernel})"
            )
        return part


def _matches(asked: str, ran: str) -> bool:
    kernels = set(ran.split("+"))
    if asked == "sdpa":  # SDPA chooses its kernel: any of the pinnable SDPA kernels proves it ran
        return all(name in ATTENTION_SPECS and ATTENTION_SPECS[name].sdpa_kernel for name in kernels)
    return kernels == {asked}


KNOB = Attention()
