"""`--as lightning`: lightning.Trainer and AdamW kwargs; what Lightning cannot express is a comment."""

from __future__ import annotations

from typing import Any

from hpo.app.export_as.winner import HF_ATTN, Winner, attention_note, checkpointing_note, knobs_line
from hpo.knobs.registry import PRECISION_SPECS

__all__ = ["lightning_arguments"]


def lightning_arguments(w: Winner) -> tuple[dict[str, Any], dict[str, Any], list[str]]:
    """(lightning.Trainer kwargs, torch.optim.AdamW kwargs, comment lines)."""
    trainer = {
        "precision": PRECISION_SPECS[w.precision].lightning,
        "max_steps": w.max_steps,
        "gradient_clip_val": w.grad_clip,
        "accelerator": "cpu" if w.on_cpu else "gpu",
        "devices": 1,
    }
    optimizer = {"lr": w.lr, "weight_decay": w.weight_decay, "foreach": w.optimizer == "foreach", "fused": w.optimizer == "fused"}
    notes = [
        f"# hpo trial {w.number}, knobs as observed: {knobs_line(w)}",
        "# optimizer: torch.optim.AdamW(params, **optimizer_kwargs)",
    ]
    if w.optimizer == "fused" and PRECISION_SPECS[w.precision].autocast:
        del trainer["gradient_clip_val"]  # Lightning refuses it for a fused optimizer under mixed precision
        notes.append(
            f"# grad_clip={w.grad_clip}: Lightning's gradient_clip_val refuses a fused optimizer under mixed precision; "
            f"clip in on_before_optimizer_step: torch.nn.utils.clip_grad_norm_(module.parameters(), {w.grad_clip})"
        )
    notes.append(f"# batch_size={w.batch_size}: Lightning's Trainer has none; DataLoader(dataset, batch_size={w.batch_size})")
    if w.transformers_model:
        notes.append(
            f"# attention={w.attention}: Lightning has no attention setting; build the model with "
            f"attn_implementation={HF_ATTN[w.attention]!r}"
        )
    else:
        notes.append(attention_note(w))
    if w.sdpa_kernel:
        notes.append(
            f"# Lightning cannot pin an SDPA kernel: wrap trainer.fit() in torch.nn.attention.sdpa_kernel(SDPBackend.{w.sdpa_kernel})"
        )
    if w.grad_checkpointing:
        notes += ["# grad_checkpointing: Lightning has no flag; in configure_model:", checkpointing_note(w)]
    if w.compile:
        notes.append(
            f"# compile: Lightning has no flag; torch.compile(model, backend={w.compile_backend!r}, mode={w.compile!r}) before fit"
        )
    if w.warmup_steps:
        notes.append(f"# warmup: a LambdaLR of min(1, (step + 1) / {w.warmup_steps}) in configure_optimizers")
    return trainer, optimizer, notes
