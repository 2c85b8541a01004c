"""`--as hf`: TrainingArguments and from_pretrained kwargs for the trial, in the installed
transformers' own names; each knob's part is written by its module (`Knob.hf`)."""

from __future__ import annotations

from typing import Any

from hpo.app.export_as.winner import Winner, knobs_line
from hpo.knobs.systems import KNOBS

__all__ = ["hf_arguments"]


def hf_arguments(w: Winner) -> tuple[dict[str, Any], dict[str, Any], list[str]]:
    """(TrainingArguments kwargs, from_pretrained model kwargs, comment lines)."""
    args: dict[str, Any] = {"output_dir": "hpo-trial-output"}
    model: dict[str, Any] = {}
    notes = [f"# hpo trial {w.number}, knobs as observed: {knobs_line(w)}"]
    for knob in KNOBS.values():
        part = knob.hf(w)
        args.update(part.args)
        model.update(part.model)
        notes += part.notes
    args.update(_hyperparameters(w))
    _current_names(args)
    notes.append("# weight_decay: the Trainer exempts biases and LayerNorm weights; hpo decayed every parameter")
    return args, model, notes


def _hyperparameters(w: Winner) -> dict[str, Any]:
    """The trial's hyperparameters and schedule as TrainingArguments kwargs."""
    return dict(
        learning_rate=w.lr,
        per_device_train_batch_size=w.batch_size,
        weight_decay=w.weight_decay,
        max_grad_norm=w.grad_clip,
        lr_scheduler_type="constant_with_warmup",
        warmup_steps=w.warmup_steps,
        max_steps=w.max_steps,
        seed=w.seed,
        use_cpu=w.on_cpu,
        report_to="none",
    )


def _current_names(args: dict[str, Any]) -> None:
    """transformers 5.24 renamed gradient_checkpointing* to activation_checkpointing*: the names the
    installed TrainingArguments declares are written, so it takes them without a FutureWarning."""
    import dataclasses as dc

    from transformers import TrainingArguments

    fields = {f.name for f in dc.fields(TrainingArguments)}
    for old in ("gradient_checkpointing", "gradient_checkpointing_kwargs"):
        new = old.replace("gradient_", "activation_")
        if old in args and new in fields:
            args[new] = args.pop(old)
