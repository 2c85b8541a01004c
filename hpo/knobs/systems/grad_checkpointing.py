"""`systems.grad_checkpointing`: recompute each of the workload's checkpoint blocks in backward
instead of keeping its activations.

Applied to the workload's checkpoint blocks by its hook, `hpo.knobs.recompute.CheckpointingHook`. Observed as recomputation: a block's forward
run again inside backward, counted by a wrapper, or a compiled graph's checkpoint regions."""

from __future__ import annotations

from typing import Any

from hpo.knobs.knob import HfPart, Knob, LightningPart, LoopPart

__all__ = ["KNOB", "checkpointing_note"]

_ENABLE = "model.gradient_checkpointing_enable({'use_reentrant': False})"


def checkpointing_note(w: Any) -> str:
    """How to checkpoint as the trial did: `gradient_checkpointing_enable` is a transformers model's."""
    blocks = "wrap each of the workload's checkpoint_blocks in torch.utils.checkpoint.checkpoint(..., use_reentrant=False)"
    if w.transformers_model:
        return f"# grad_checkpointing: call {_ENABLE}"
    if w.transformers_model is False:
        return f"# grad_checkpointing: {w.workload.get('name')} builds no transformers model: {blocks}"
    return f"# grad_checkpointing: on a transformers model call {_ENABLE}; on another, {blocks}"


class GradCheckpointing(Knob):
    name = "grad_checkpointing"
    help = "recompute each checkpoint block's activations in backward instead of keeping them"
    position = 40
    applies_to = "model"
    hook = "hpo.knobs.recompute:CHECKPOINTING_HOOK"
    values = (False, True)
    default = False
    reference = False
    value_type = bool
    schema = bool
    column = "ckpt"
    cli_flag = "--checkpointing"
    observed_fields = {"grad_checkpointing": (bool, ...)}

    def observe(self, evidence: Any) -> dict[str, Any]:
        return {"grad_checkpointing": evidence.recompute_in_step > 0 or evidence.graphs.checkpoint_regions > 0}

    def python_loop(self, w: Any) -> LoopPart:
        if not w.knobs["grad_checkpointing"]:
            return LoopPart()
        return LoopPart(setup=[_ENABLE if w.transformers_model else checkpointing_note(w)])

    def hf(self, w: Any) -> HfPart:
        on = w.knobs["grad_checkpointing"]
        if on and w.transformers_model is False:
            # The Trainer's flag calls gradient_checkpointing_enable, which only a transformers model has.
            return HfPart(args={"gradient_checkpointing": False}, notes=[checkpointing_note(w)])
        args: dict[str, Any] = {"gradient_checkpointing": on}
        if on:
            args["gradient_checkpointing_kwargs"] = {"use_reentrant": False}  # hpo's checkpointing is non-reentrant
        return HfPart(args=args)

    def lightning(self, w: Any) -> LightningPart:
        if not w.knobs["grad_checkpointing"]:
            return LightningPart()
        return LightningPart(notes=["# grad_checkpointing: Lightning has no flag; in configure_model:", checkpointing_note(w)])


KNOB = GradCheckpointing()
