"""The one task both sides of `scripts/bench-vs-hf` run, and hpo's search-space file for it.

all-MiniLM-L6-v2 fine-tuned on hpo's `text_classification` data (the same tokenized tensors, from
`hpo.workloads.text_classification.load_data`), fp32, SDPA attention, fused AdamW, learning rate
searched log-uniform, TPE seeded 0, one evaluation at the end of each trial, on the CPU. The
values that hpo's `search_spaces/text_classification.yaml` fixes (weight decay, warmup) and the
workload's option defaults (dropout, no attention dropout) are copied here so both sides match.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from hpo.errors import UserInputError

__all__ = ["LENGTHS", "SearchTask", "hpo_space"]

# Trial lengths in training steps. "default" is search_spaces/text_classification.yaml's max_steps.
LENGTHS = {"short": 10, "default": 150}


@dataclass(frozen=True, kw_only=True)
class SearchTask:
    """One search: `trials` trials of `steps` training steps each."""

    steps: int
    trials: int
    n_eval: int = 256  # validation texts (hpo's n_eval option); all ~1500 training texts are used
    max_length: int = 64
    batch_size: int = 16
    eval_batch_size: int = 64  # hpo's text_classification.EVAL_BATCH_SIZE
    lr_low: float = 1e-5
    lr_high: float = 1e-3
    weight_decay: float = 0.01  # search_spaces/text_classification.yaml
    warmup_steps: int = 10  # search_spaces/text_classification.yaml
    dropout: float = 0.1  # TextClassificationOptions.dropout (hidden_dropout_prob)
    attention_dropout: float = 0.0  # TextClassificationOptions.attention_dropout
    seed: int = 0  # TPE's seed, the Trainer's seed and hpo's study seed

    def __post_init__(self) -> None:
        for name in ("steps", "trials", "n_eval"):
            if getattr(self, name) < 1:
                raise UserInputError(f"--{name.replace('_', '-')} must be an integer >= 1, got {getattr(self, name)}")

    def as_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def length_name(self) -> str:
        """'short' or 'default' for those step counts, else e.g. '25-steps' (for file names)."""
        return next((name for name, steps in LENGTHS.items() if steps == self.steps), f"{self.steps}-steps")


def hpo_space(task: SearchTask, study: str) -> dict[str, Any]:
    """The search-space file `hpo run` gets: only lr searched, every knob fixed, no pruning."""
    return {
        "study": {
            "name": study,
            "objectives": ["val_loss"],
            "directions": ["minimize"],
            "sampler": {"name": "tpe", "seed": task.seed},
            "pruner": {"name": "none"},  # the Trainer side reports nothing to prune on
            "n_trials": task.trials,
            "seed": task.seed,
        },
        "workload": {
            "name": "text_classification",
            "model": "minilm",
            "max_steps": task.steps,
            "eval_every": task.steps,  # one evaluation, at the end
            "max_length": task.max_length,
            "n_eval": task.n_eval,
            "dropout": task.dropout,
            "attention_dropout": task.attention_dropout,
        },
        "params": {
            "lr": {"low": task.lr_low, "high": task.lr_high, "log": True},
            "batch_size": task.batch_size,
            "weight_decay": task.weight_decay,
            "warmup_steps": task.warmup_steps,
        },
        "systems": {
            "precision": "fp32",
            "attention": "sdpa",
            "optimizer": "fused",
            "grad_checkpointing": False,
            "compile": False,
            "device": "cpu",  # the Trainer side runs with use_cpu=True
        },
    }
