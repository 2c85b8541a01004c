"""Turn what was seen during one training step into `knobs_observed`, and compare it with the request.

Sources: the dtypes reaching matmul kernels (dispatcher, or compiled graphs' metadata), the aten ops
in torch.profiler (attention kernel, optimizer path), block forward counts (recomputation), and the
graphs the compile backend received. Nothing here reads the requested knobs to decide what ran.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import NamedTuple

from hpo.config.trial import Knobs
from hpo.knobs.compiled_graphs import GraphRecord
from hpo.knobs.registry import ATTENTION_SPECS, OPTIMIZER_SPECS, PRECISION_SPECS, OptimizerEvidence
from hpo.records import KnobsObserved
from hpo.verdicts import Kind, Verdict


def dtype_names() -> dict[str, str]:
    """torch dtype name -> the precision value whose autocast dtype it is (from the registry)."""
    return {spec.dtype: name for name, spec in PRECISION_SPECS.items()}


def attention_kernel_ops() -> tuple[tuple[str, str], ...]:
    """(profiler op-name fragment, the attention backend it proves ran), from the registry."""
    return tuple((op, name) for name, spec in ATTENTION_SPECS.items() for op in spec.evidence_ops)


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
    """The trial's `knobs_observed` record (`hpo.records.KnobsObserved`)."""
    precisions = _precisions(ev.graphs.matmul_dtypes if ev.graphs.graphs else ev.matmul_dtypes)
    attention = _attention(ev.profiler_ops, ev.graphs)
    return KnobsObserved(
        precision=_one_or_mixed(precisions),
        attention_dtype=_one_or_mixed(_precisions(ev.attention_dtypes)),
        attention=attention,
        optimizer=_optimizer(ev.optimizer_ops, ev.optimizer_module),
        grad_checkpointing=ev.recompute_in_step > 0 or ev.graphs.checkpoint_regions > 0,
        compile=ev.graphs.graphs > 0,
        compiled_graphs=ev.graphs.graphs,
        grad_scaler=ev.grad_scaler_scale is not None,
        precisions=precisions,
        attentions=[] if attention is None else attention.split("+"),
    ).model_dump()


def _precisions(dtypes: Counter) -> list[str]:
    """The precisions whose dtypes reached matmul-class kernels; none when none ran in view."""
    known = dtype_names()
    return sorted({known.get(d, d) for d in dtypes})


def _one_or_mixed(names: list[str]) -> str | None:
    """None when nothing was observed (recorded as nothing, never a guess)."""
    if not names:
        return None
    return names[0] if len(names) == 1 else "mixed(" + "+".join(names) + ")"


def _attention(ops: Iterable[str], graphs: GraphRecord) -> str | None:
    """The attention kernels the step shows, from the registry's evidence. A kernel hpo does not
    know reads as None (not observed), never as eager: eager is proven by its own exact softmax ops,
    and only when no kernel's op ran (SDPA's math kernel calls the same softmax)."""
    ops = set(ops)
    seen = sorted({backend for op in ops for frag, backend in attention_kernel_ops() if frag in op})
    if seen:
        return "+".join(seen)
    if graphs.sdpa_nodes:
        # The graph calls SDPA yet no fused SDPA kernel ran: it was lowered to its math decomposition.
        return "sdpa_math"
    fallback = sorted(name for name, spec in ATTENTION_SPECS.items() if ops.intersection(spec.fallback_ops))
    if not fallback and graphs.softmax_nodes > 0:  # a compiled graph's softmax node: eager attention
        fallback = [name for name, spec in ATTENTION_SPECS.items() if "aten::softmax" in spec.fallback_ops]
    return "+".join(fallback) or None  # no attention kernel and no softmax: not observed


def _optimizer(ops: Iterable[str], optimizer_module: str) -> str | None:
    """The first optimizer value, by evidence rank, whose evidence the step shows; else the one
    that leaves none (the plain for-loop). None when no optimizer step ran in view at all.

    A value proven by its class (apex) is read before the ops: apex runs aten ops only on its first
    step and then launches amp_C kernels the profiler does not record, so a later step shows none."""
    ops = set(ops)
    ranked = sorted(OPTIMIZER_SPECS.values(), key=lambda spec: -spec.evidence.rank)
    for spec in ranked:
        prefix = spec.evidence.module_prefix
        if prefix and optimizer_module.startswith(prefix):
            return spec.name
    if not ops:
        return None
    for spec in ranked:
        if _shows(spec.evidence, ops):
            return spec.name
    fallback = [spec.name for spec in ranked if not (spec.evidence.module_prefix or spec.evidence.ops)]
    return fallback[0]


def _shows(evidence: OptimizerEvidence, ops: set[str]) -> bool:
    return any(frag in op and op not in evidence.except_ops for op in ops for frag in evidence.ops)


class Mismatch(NamedTuple):
    """A knob the evidence shows did not run as requested."""

    knob: str
    asked: object
    ran: object

    def __str__(self) -> str:
        if self.knob == "compile":
            return f"compile: asked {self.asked}, compiled graphs: {self.ran}"
        if self.knob == "grad_scaler":
            return f"grad_scaler: expected only with fp16, ran {self.ran}"
        return f"{self.knob}: asked {self.asked}, ran {self.ran}"


def mismatches(requested: Knobs, observed: dict) -> list[Mismatch]:
    """Each knob that the evidence shows did not run as requested."""
    found = []
    # A knob nothing observed (None) contradicts nothing; it is recorded as null, never as a value.
    if observed["precision"] is not None and observed["precision"] != requested.precision:
        found.append(Mismatch("precision", requested.precision, observed["precision"]))
    att = observed["attention"]
    if att is not None and not _attention_matches(requested.attention, att):
        found.append(Mismatch("attention", requested.attention, att))
    if observed["optimizer"] is not None and observed["optimizer"] != requested.optimizer:
        found.append(Mismatch("optimizer", requested.optimizer, observed["optimizer"]))
    if observed["grad_checkpointing"] != requested.grad_checkpointing:
        found.append(Mismatch("grad_checkpointing", requested.grad_checkpointing, observed["grad_checkpointing"]))
    if observed["compile"] != bool(requested.compile):
        found.append(Mismatch("compile", requested.compile, observed["compile"]))
    scaled = PRECISION_SPECS[requested.precision].scaled
    if observed["grad_scaler"] != scaled:
        found.append(Mismatch("grad_scaler", scaled, observed["grad_scaler"]))
    return found


def mismatch_verdict(kind: Kind, found: list[Mismatch], requested: Knobs, prefix: str = "") -> Verdict:
    """The verdict for knobs that ran as something else; it implicates the knobs that did."""
    knobs = requested.as_dict()
    implicated = [(m.knob, knobs[m.knob]) for m in found if m.knob in knobs]
    if any(m.knob == "grad_scaler" for m in found):
        implicated.append(("precision", requested.precision))
    return Verdict.make(kind, prefix + "; ".join(str(m) for m in found), dict(implicated).items())


def _attention_matches(asked: str, ran: str) -> bool:
    kernels = set(ran.split("+"))
    if asked == "sdpa":  # SDPA chooses its kernel: any of the pinnable SDPA kernels proves it ran
        return all(name in ATTENTION_SPECS and ATTENTION_SPECS[name].sdpa_kernel for name in kernels)
    return kernels == {asked}
