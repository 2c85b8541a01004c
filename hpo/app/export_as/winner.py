"""The trial to export, as it ran: its OBSERVED knobs (`knobs_observed`), never those it asked for,
and its hyperparameters from its config. A trial whose evidence is missing for any knob is refused."""

from __future__ import annotations

import dataclasses
from typing import Any

import optuna

from hpo.errors import UserInputError
from hpo.knobs.registry import ATTENTION_SPECS, KNOB_NAMES
from hpo.records import RecordKey, observed_lists

__all__ = ["HF_ATTN", "TRANSFORMERS_WORKLOADS", "Winner", "attention_note", "checkpointing_note", "knobs_line", "winner_of"]

# hpo attention value -> transformers attn_implementation, for the values transformers itself knows
# (not one hpo registers with it at run time, which an exported config cannot name).
HF_ATTN = {
    name: spec.transformers for name, spec in ATTENTION_SPECS.items() if spec.transformers and not spec.transformers_by_hpo
}
# The built-in workloads whose model is a transformers model, where attn_implementation applies; the
# other built-ins call hpo's attention_function, and a user's `module:Class` may be either.
TRANSFORMERS_WORKLOADS = ("text_classification", "hf_text_classification", "hf_causal_lm")


@dataclasses.dataclass(frozen=True)
class Winner:
    """What a trial ran: observed knobs, its hyperparameters and where it ran."""

    number: int
    precision: str
    attention: str
    optimizer: str
    grad_checkpointing: bool
    compile: str | bool  # False, or the inductor mode the observed compiled graphs ran
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

    @property
    def on_cpu(self) -> bool:
        return self.device.startswith("cpu")

    @property
    def transformers_model(self) -> bool | None:
        """Whether the trial's model is a transformers model; None for a user's workload (unknown)."""
        name = str(self.workload.get("name", ""))
        return None if ":" in name else name in TRANSFORMERS_WORKLOADS

    @property
    def sdpa_kernel(self) -> str | None:
        spec = ATTENTION_SPECS.get(self.attention)
        return spec.sdpa_kernel if spec is not None else None


def winner_of(trial: optuna.trial.FrozenTrial) -> Winner:
    """The trial's observed knobs and hyperparameters; one line when its evidence is missing."""
    attrs = trial.user_attrs
    observed, config = attrs.get(RecordKey.KNOBS_OBSERVED) or {}, attrs.get(RecordKey.CONFIG) or {}
    missing = [k for k in KNOB_NAMES if observed.get(k) is None]
    if not config or missing:
        raise UserInputError(
            f"trial {trial.number}: no evidence for {missing or 'its config'} (knobs_observed: {observed or None}); "
            f"hpo exports only what a trial was seen to run: pick a trial that trained (--trial N)"
        )
    precisions, attentions = observed_lists(observed)
    if len(precisions) > 1 or len(attentions) > 1:
        raise UserInputError(
            f"trial {trial.number}: it ran more than one kernel or dtype ({observed}); no single setting reproduces it"
        )
    if observed["attention"] not in HF_ATTN:
        raise UserInputError(
            f"trial {trial.number}: attention={observed['attention']} has no attn_implementation in transformers "
            f"(hpo registers its own kernel for it); known: {sorted(HF_ATTN)}"
        )
    params, systems = config.get("params", {}), config.get("systems", {})
    return Winner(
        number=trial.number,
        precision=observed["precision"],
        attention=observed["attention"],
        optimizer=observed["optimizer"],
        grad_checkpointing=bool(observed["grad_checkpointing"]),
        compile=(systems.get("compile") or "default") if observed["compile"] else False,
        compile_backend=systems.get("compile_backend", "inductor"),
        lr=float(params["lr"]),
        batch_size=int(params["batch_size"]),
        weight_decay=float(params.get("weight_decay", 0.0)),
        warmup_steps=int(params.get("warmup_steps", 0)),
        grad_clip=float(params.get("grad_clip", 1.0)),
        max_steps=int(attrs.get(RecordKey.STEPS_RUN) or config["workload"]["max_steps"]),
        seed=int(config.get("study", {}).get("seed", 0)),
        device=str(attrs.get(RecordKey.DEVICE, "cpu")),
        workload=dict(config.get("workload", {})),
    )


def knobs_line(w: Winner) -> str:
    """The comment line every export starts with."""
    return ", ".join(f"{k}={getattr(w, k)}" for k in KNOB_NAMES)


def attention_note(w: Winner) -> str:
    """How to get the trial's attention when the export cannot set it: attn_implementation only for
    a transformers model; hpo's own attention layers take it from `attention_function`."""
    own = f"its attention layers call hpo.knobs.attention_kernels.attention_function({w.attention!r})"
    name = w.workload.get("name")
    if w.transformers_model is False:
        return f"# attention={w.attention}: workload {name} builds no transformers model (no attn_implementation); {own}"
    return (
        f"# attention={w.attention}: hpo cannot tell whether {name} builds a transformers model: if it does, load it "
        f"with attn_implementation={HF_ATTN[w.attention]!r}; if not, {own}"
    )


def checkpointing_note(w: Winner) -> str:
    """How to checkpoint as the trial did: `gradient_checkpointing_enable` is a transformers model's."""
    enable = "model.gradient_checkpointing_enable({'use_reentrant': False})"
    blocks = "wrap each of the workload's checkpoint_blocks in torch.utils.checkpoint.checkpoint(..., use_reentrant=False)"
    if w.transformers_model:
        return f"# grad_checkpointing: call {enable}"
    if w.transformers_model is False:
        return f"# grad_checkpointing: {w.workload.get('name')} builds no transformers model: {blocks}"
    return f"# grad_checkpointing: on a transformers model call {enable}; on another, {blocks}"
