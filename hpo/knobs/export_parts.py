"""What one knob writes into each exporter's output (`Knob.python_loop`, `hf`, `lightning`): the
exporters in `hpo.app.export_as` join every knob's part."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

__all__ = ["HfPart", "LightningPart", "LoopPart"]


@dataclass
class LoopPart:
    """What one knob writes into `hpo export --as python`'s training loop."""

    setup: list[str] = field(default_factory=list)  # lines at the top of train(), before the model is used
    contexts: list[str] = field(default_factory=list)  # context managers around the forward
    optimizer_flags: str = ""  # torch.optim.AdamW keyword arguments
    forward: str | None = None  # an expression of `model` that the loop calls instead of it
    scaler: str | None = None  # the expression of the scaler that scales the loss (a GradScaler)
    loader: dict[str, Any] = field(default_factory=dict)  # torch DataLoader keyword arguments


@dataclass
class HfPart:
    """What one knob writes into `hpo export --as hf`: TrainingArguments, from_pretrained kwargs, comments."""

    args: dict[str, Any] = field(default_factory=dict)
    model: dict[str, Any] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)


@dataclass
class LightningPart:
    """What one knob writes into `hpo export --as lightning`: Trainer kwargs, AdamW kwargs, comments."""

    trainer: dict[str, Any] = field(default_factory=dict)
    trainer_drop: list[str] = field(default_factory=list)  # Trainer kwargs the export must leave out
    optimizer: dict[str, Any] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    loader: dict[str, Any] = field(default_factory=dict)  # torch DataLoader keyword arguments
