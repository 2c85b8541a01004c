"""`--as lightning`: lightning.Trainer and AdamW kwargs; what Lightning cannot express is a comment.
Each knob's part is written by its module (`Knob.lightning`)."""

from __future__ import annotations

from typing import Any

from hpo.app.export_as.winner import Winner, knobs_line
from hpo.knobs.systems import KNOBS

__all__ = ["lightning_arguments"]


def lightning_arguments(w: Winner) -> tuple[dict[str, Any], dict[str, Any], list[str]]:
    """(lightning.Trainer kwargs, torch.optim.AdamW kwargs, comment lines)."""
    trainer = _trainer_kwargs(w)
    optimizer: dict[str, Any] = {"lr": w.lr, "weight_decay": w.weight_decay}
    loader: dict[str, Any] = {"batch_size": w.batch_size}
    notes = [f"# hpo trial {w.number}, knobs as observed: {knobs_line(w)}"]
    for knob in KNOBS.values():
        part = knob.lightning(w)
        trainer.update(part.trainer)
        for key in part.trainer_drop:
            trainer.pop(key, None)
        optimizer.update(part.optimizer)
        loader.update(part.loader)
        notes += part.notes
    kwargs = ", ".join(f"{k}={v!r}" for k, v in loader.items())
    notes.append(f"# batch_size={w.batch_size}: Lightning's Trainer has none; DataLoader(dataset, {kwargs})")
    if w.warmup_steps:
        notes.append(f"# warmup: a LambdaLR of min(1, (step + 1) / {w.warmup_steps}) in configure_optimizers")
    return trainer, optimizer, notes


def _trainer_kwargs(w: Winner) -> dict[str, Any]:
    """The Trainer kwargs every trial has, before each knob's part."""
    return {
        "max_steps": w.max_steps,
        "gradient_clip_val": w.grad_clip,
        "accelerator": "cpu" if w.on_cpu else "gpu",
        "devices": 1,
    }
