"""The trial to export, as it ran: each knob's value from its evidence (`Knob.ran`: `knobs_observed`,
`loader_observed`), never the one it asked for, and its hyperparameters from its config. A trial
whose evidence is missing for any knob, or that ran a value no setting reproduces, is refused."""

from __future__ import annotations

import dataclasses
from typing import Any

import optuna

from hpo.errors import UserInputError
from hpo.knobs.knob import Seen
from hpo.knobs.systems import KNOBS, TRIAL_KNOBS
from hpo.records import RecordKey

__all__ = ["TRANSFORMERS_WORKLOADS", "Winner", "knobs_line", "winner_of"]

# The built-in workloads whose model is a transformers model, where attn_implementation applies; the
# other built-ins call hpo's attention_function, and a user's `module:Class` may be either.
TRANSFORMERS_WORKLOADS = ("text_classification", "hf_text_classification", "hf_causal_lm")


@dataclasses.dataclass(frozen=True)
class Winner:
    """What a trial ran: each knob's value as observed, its hyperparameters and where it ran."""

    number: int
    knobs: dict[str, Any]  # every knob of hpo.knobs.systems, as the trial ran it
    compile_backend: str
    lr: float
    batch_size: int
    weight_decay: float
    warmup_steps: int
    grad_clip: float
    max_steps: int
    seed: int
    device: str
    workload: dict[str, Any]
    strategy: str | None = None  # `systems.parallel.strategy` of a trial that ran as ranks: ddp or fsdp

    @property
    def sharded(self) -> bool:
        """Whether the trial's ranks ran FSDP2 (its knobs then apply as `hpo.parallel.wrap` applies them)."""
        return self.strategy == "fsdp"

    @property
    def on_cpu(self) -> bool:
        return self.device.startswith("cpu")

    @property
    def device_type(self) -> str:
        return "cpu" if self.on_cpu else "cuda"

    @property
    def transformers_model(self) -> bool | None:
        """Whether the trial's model is a transformers model; None for a user's workload (unknown)."""
        name = str(self.workload.get("name", ""))
        return None if ":" in name else name in TRANSFORMERS_WORKLOADS


def winner_of(trial: optuna.trial.FrozenTrial) -> Winner:
    """The trial's observed knobs and hyperparameters; one line when its evidence is missing."""
    attrs = trial.user_attrs
    observed, config = attrs.get(RecordKey.KNOBS_OBSERVED) or {}, attrs.get(RecordKey.CONFIG) or {}
    params, systems = config.get("params", {}), config.get("systems", {})
    seen = Seen(observed, attrs.get(RecordKey.LOADER_OBSERVED), systems)
    knobs = {name: knob.ran(seen) for name, knob in KNOBS.items()}
    _refuse_unexportable(trial.number, knobs, observed, config)
    return Winner(
        number=trial.number,
        knobs=knobs,
        compile_backend=systems.get("compile_backend", "inductor"),
        **_hyperparameters(params),
        max_steps=int(attrs.get(RecordKey.STEPS_RUN) or config["workload"]["max_steps"]),
        seed=int(config.get("study", {}).get("seed", 0)),
        device=str(attrs.get(RecordKey.DEVICE, "cpu")),
        workload=dict(config.get("workload", {})),
        strategy=(systems.get("parallel") or {}).get("strategy"),
    )


def _hyperparameters(params: dict[str, Any]) -> dict[str, Any]:
    """The trial's hyperparameters the exports write, with hpo's defaults where its config has none."""
    return {
        "lr": float(params["lr"]),
        "batch_size": int(params["batch_size"]),
        "weight_decay": float(params.get("weight_decay", 0.0)),
        "warmup_steps": int(params.get("warmup_steps", 0)),
        "grad_clip": float(params.get("grad_clip", 1.0)),
    }


def _refuse_unexportable(number: int, knobs: dict[str, Any], observed: dict, config: dict) -> None:
    """A UserInputError when the trial has no config, no evidence of a knob that needs it, or a knob
    value its export refuses."""
    missing = [name for name in TRIAL_KNOBS if knobs[name] is None and TRIAL_KNOBS[name].evidence_required]
    if not config or missing:
        raise UserInputError(
            f"trial {number}: no evidence for {missing or 'its config'} (knobs_observed: {observed or None}); "
            f"hpo exports only what a trial was seen to run: pick a trial that trained (--trial N)"
        )
    for name, value in knobs.items():
        why = None if value is None else KNOBS[name].refused_export(value)
        if why:
            raise UserInputError(f"trial {number}: {why}")


def knobs_line(w: Winner) -> str:
    """The comment line every export starts with: the trial's knobs as they ran."""
    return ", ".join(f"{name}={w.knobs[name]}" for name in TRIAL_KNOBS if w.knobs[name] is not None)
