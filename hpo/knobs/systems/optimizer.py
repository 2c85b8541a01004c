"""`systems.optimizer`: the AdamW implementation, torch's for-loop, foreach or fused path, or apex's
FusedAdam.

Applied when the optimizer is built, by its hook (`hpo.knobs.adamw_builders.OptimizerHook`). Observed from the step: apex by
its class, the torch paths by the ops inside `Optimizer.step` (fused's `_fused_adam`, foreach's
`_foreach_*`); a step with neither ran the for-loop."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from hpo.deps import require_extra
from hpo.errors import UserInputError
from hpo.knobs.knob import HfPart, Knob, LightningPart, LoopPart, Needs, by_name
from hpo.knobs.systems.precision import PRECISION_SPECS

__all__ = ["KNOB", "OPTIMIZER_SPECS", "OptimizerEvidence", "OptimizerSpec"]


@dataclass(frozen=True, kw_only=True)
class OptimizerEvidence:
    """How a step's evidence shows this optimizer path ran. Higher `rank` is tried first: the
    first value whose evidence is present is what ran; a value with no evidence is the fallback."""

    module_prefix: str | None = None  # the optimizer class's module starts with this
    ops: tuple[str, ...] = ()  # an op inside Optimizer.step contains one of these
    except_ops: tuple[str, ...] = ()  # ...unless it is one of these (shared with other paths)
    rank: int = 0

    def shown_by(self, ops: set[str]) -> bool:
        return any(frag in op and op not in self.except_ops for op in ops for frag in self.ops)


@dataclass(frozen=True, kw_only=True)
class OptimizerSpec:
    """An AdamW implementation: its builder, and the torch constructor flags that select it."""

    name: str
    builder: str  # "module:attr": builder(params, *, lr, weight_decay, **torch_flags)
    torch_flags: tuple[tuple[str, bool], ...] | None = None  # None: not a torch path (own class)
    evidence: OptimizerEvidence = field(default_factory=OptimizerEvidence)
    needs: Needs = field(default_factory=Needs)


_OPT = "hpo.knobs.adamw_builders:"

OPTIMIZER_SPECS: dict[str, OptimizerSpec] = by_name(
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


def optimizer_ran(ops: set[str], optimizer_module: str) -> str | None:
    """The first optimizer value, by evidence rank, whose evidence the step shows; else the one
    that leaves none (the plain for-loop). None when no optimizer step ran in view at all.

    A value proven by its class (apex) is read before the ops: apex runs aten ops only on its first
    step and then launches amp_C kernels the profiler does not record, so a later step shows none."""
    ranked = sorted(OPTIMIZER_SPECS.values(), key=lambda spec: -spec.evidence.rank)
    for spec in ranked:
        prefix = spec.evidence.module_prefix
        if prefix and optimizer_module.startswith(prefix):
            return spec.name
    if not ops:
        return None
    for spec in ranked:
        if spec.evidence.shown_by(ops):
            return spec.name
    return next(spec.name for spec in ranked if not (spec.evidence.module_prefix or spec.evidence.ops))


class Optimizer(Knob):
    name = "optimizer"
    help = "the AdamW implementation: torch's forloop, foreach or fused path, or apex's FusedAdam"
    position = 30
    applies_to = "optimizer"
    hook = "hpo.knobs.adamw_builders:OPTIMIZER_HOOK"
    specs = OPTIMIZER_SPECS
    default = "fused"
    reference = "forloop"
    value_type = str
    observed_fields = {"optimizer": (str | None, ...)}

    @property
    def values(self) -> tuple:  # type: ignore[override]
        """Every value with a spec: a spec added to OPTIMIZER_SPECS is an allowed value."""
        return (*OPTIMIZER_SPECS,)

    def observe(self, evidence: Any) -> dict[str, Any]:
        return {"optimizer": optimizer_ran(set(evidence.optimizer_ops), evidence.optimizer_module)}

    def python_loop(self, w: Any) -> LoopPart:
        flags = OPTIMIZER_SPECS[w.knobs["optimizer"]].torch_flags
        if flags is None:
            raise UserInputError(f"trial {w.number}: optimizer={w.knobs['optimizer']} is not a torch.optim.AdamW path")
        return LoopPart(optimizer_flags=", ".join(f"{flag}={on}" for flag, on in flags))

    def hf(self, w: Any) -> HfPart:
        return HfPart(args={"optim": _hf_optim(w)})

    def lightning(self, w: Any) -> LightningPart:
        chosen = w.knobs["optimizer"]
        part = LightningPart(
            optimizer={"foreach": chosen == "foreach", "fused": chosen == "fused"},
            notes=["# optimizer: torch.optim.AdamW(params, **optimizer_kwargs)"],
        )
        if chosen == "fused" and PRECISION_SPECS[w.knobs["precision"]].autocast:
            part.trainer_drop.append("gradient_clip_val")  # Lightning refuses it for a fused optimizer under mixed precision
            part.notes.append(
                f"# grad_clip={w.grad_clip}: Lightning's gradient_clip_val refuses a fused optimizer under mixed precision; "
                f"clip in on_before_optimizer_step: torch.nn.utils.clip_grad_norm_(module.parameters(), {w.grad_clip})"
            )
        return part


def _hf_optim(w: Any) -> str:
    """transformers' `optim` string for the optimizer path that ran, looked up in its OptimizerNames."""
    require_extra("export --as hf", ["transformers"])
    import transformers
    from transformers.training_args import OptimizerNames

    # adamw_torch is torch's default AdamW path: the for-loop on CPU, foreach on CUDA. transformers 4
    # named apex's FusedAdam adamw_apex_fused; transformers 5 dropped it.
    chosen = w.knobs["optimizer"]
    table = {"fused": "adamw_torch_fused", "apex": "adamw_apex_fused", ("forloop" if w.on_cpu else "foreach"): "adamw_torch"}
    name = table.get(chosen)
    if name is None or name not in {o.value for o in OptimizerNames}:
        why = f"no {name!r} in" if name else "no `optim` string for it in"
        raise UserInputError(
            f"trial {w.number}: optimizer={chosen} on {w.device}: transformers {transformers.__version__} has {why} "
            f"its OptimizerNames; export --as python or --as lightning instead"
        )
    return name


KNOB = Optimizer()
