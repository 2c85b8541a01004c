"""`systems.precision`: the dtype forward runs in (autocast), and fp16's loss scaling.

Applied to the model's step by its hook, `hpo.knobs.precision_plugins.PrecisionHook`: the plugin it
makes converts the module, runs forward under autocast and owns fp16's GradScaler. Observed from the dtypes that reached
matmul-class kernels (the dispatcher, or a compiled graph's metadata) and from whether a GradScaler
scaled the loss."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from hpo.knobs.knob import HfPart, Knob, LightningPart, LoopPart, Mismatch, Needs, by_name

__all__ = ["KNOB", "PRECISION_SPECS", "PrecisionSpec", "observed_precisions", "one_or_mixed"]


@dataclass(frozen=True, kw_only=True)
class PrecisionSpec:
    """A precision: the autocast dtype (a torch dtype's name), whether fp16 loss scaling is on."""

    name: str
    dtype: str  # torch dtype name; the dtype seen reaching matmul kernels is the evidence
    # Explicit mantissa bits of `dtype`: the rounding the probe emulates to measure a model's floor
    # (`hpo.verify.probing._bounds`).
    mantissa_bits: int
    autocast: bool  # False: full precision, no autocast region at all
    scaled: bool = False  # a GradScaler scales the loss (fp16's narrow exponent range needs it)
    lightning: str  # Lightning's precision string for the same choice
    # transformers' TrainingArguments flag that turns it on ("bf16", "fp16"); None: no flag, fp32
    trainer_flag: str | None = None
    aliases: tuple[str, ...] = ()  # other spellings the schema accepts
    needs: Needs = field(default_factory=Needs)


PRECISION_SPECS: dict[str, PrecisionSpec] = by_name(
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

_ALIASES = {alias: spec.name for spec in PRECISION_SPECS.values() for alias in spec.aliases}


def observed_precisions(dtypes: Counter) -> list[str]:
    """The precisions whose dtypes reached matmul-class kernels; none when none ran in view."""
    known = {spec.dtype: name for name, spec in PRECISION_SPECS.items()}
    return sorted({known.get(d, d) for d in dtypes})


def one_or_mixed(names: list[str]) -> str | None:
    """None when nothing was observed (recorded as nothing, never a guess)."""
    if not names:
        return None
    return names[0] if len(names) == 1 else "mixed(" + "+".join(names) + ")"


class Precision(Knob):
    name = "precision"
    help = "the dtype forward runs in: fp32, or bf16/fp16 autocast (fp16 with a GradScaler)"
    position = 10
    applies_to = "model"
    hook = "hpo.knobs.precision_plugins:PRECISION_HOOK"
    specs = PRECISION_SPECS
    default = "fp32"
    reference = "fp32"
    value_type = str
    observed_fields = {
        # null: nothing observed it (never a guessed value); several: "mixed(bf16+fp32)"
        "precision": (str | None, ...),
        "grad_scaler": (bool, ...),
        # Every precision seen, as a list: what code reads (the string above is for people). Absent
        # from records written before it: `hpo.records.observed_lists` reads those.
        "precisions": (list[str] | None, None),
    }

    @property
    def values(self) -> tuple:  # type: ignore[override]
        """Every value with a spec: a spec added to PRECISION_SPECS is an allowed value."""
        return (*PRECISION_SPECS,)

    def normalized(self, value: Any) -> Any:
        return _ALIASES.get(value, value) if isinstance(value, str) else value

    def observe(self, evidence: Any) -> dict[str, Any]:
        graphs = evidence.graphs
        precisions = observed_precisions(graphs.matmul_dtypes if graphs.graphs else evidence.matmul_dtypes)
        return {
            "precision": one_or_mixed(precisions),
            "grad_scaler": evidence.grad_scaler_scale is not None,
            "precisions": precisions,
        }

    def mismatches(self, asked: Any, observed: dict[str, Any], knobs: Any) -> list[Mismatch]:
        found = super().mismatches(asked, observed, knobs)
        scaled = PRECISION_SPECS[asked].scaled
        if observed["grad_scaler"] != scaled:
            found.append(
                Mismatch(
                    "grad_scaler", scaled, observed["grad_scaler"], f"expected only with fp16, ran {observed['grad_scaler']}"
                )
            )
        return found

    def implicated(self, mismatch: Mismatch, knobs: dict[str, Any]) -> list[tuple[str, Any]]:
        return [("precision", knobs["precision"])]

    def refused_export(self, value: Any) -> str | None:
        if value not in PRECISION_SPECS:
            return f"it ran more than one dtype (precision={value}); no single setting reproduces it"
        return None

    def python_loop(self, w: Any) -> LoopPart:
        spec = PRECISION_SPECS[w.knobs["precision"]]
        if w.sharded and spec.autocast:
            return _sharded_loop_part(spec, w.device_type)
        autocast = f"torch.autocast({w.device_type!r}, dtype=torch.{spec.dtype})" if spec.autocast else None
        scaler = f"torch.amp.GradScaler({w.device_type!r})" if spec.scaled else None
        return LoopPart(contexts=[autocast] if autocast else [], scaler=scaler)

    def hf(self, w: Any) -> HfPart:
        chosen = w.knobs["precision"]
        flags = {spec.trainer_flag: name == chosen for name, spec in PRECISION_SPECS.items() if spec.trainer_flag}
        return HfPart(args=flags, notes=["# torch_dtype/dtype: not set; the trial kept float32 weights under autocast"])

    def lightning(self, w: Any) -> LightningPart:
        return LightningPart(trainer={"precision": PRECISION_SPECS[w.knobs["precision"]].lightning})


def _sharded_loop_part(spec: PrecisionSpec, device_type: str) -> LoopPart:
    """The precision as the trial's FSDP2 ranks ran it (`hpo.parallel.wrap`): the MixedPrecisionPolicy
    casts the parameters, so forward enters no autocast region; fp16's loss is scaled by the sharded
    scaler (`hpo.parallel.sharded_scaling`)."""
    setup = [f"# precision {spec.name} under FSDP2: fully_shard's MixedPrecisionPolicy casts the parameters; no autocast region"]
    if not spec.scaled:
        return LoopPart(setup=setup)
    return LoopPart(
        setup=[
            *setup,
            "# ShardedGradScaler, as the trial's ranks scaled: each rank holds only its shard of the gradients,",
            "# and the scaler all-reduces its inf flag over the group, so every rank skips an overflowing step together",
            "from torch.distributed.fsdp.sharded_grad_scaler import ShardedGradScaler",
        ],
        scaler=f"ShardedGradScaler(device={device_type!r})",
    )


KNOB = Precision()
