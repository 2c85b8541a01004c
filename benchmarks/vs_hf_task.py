"""The tasks both sides of `scripts/bench-vs-hf` run, and hpo's search-space file for each.

Both sides train the same model on the same data, fp32, SDPA attention, fused AdamW, learning rate
searched log-uniform, TPE seeded 0, one evaluation at the end of each trial, on the CPU:
- `text_classification`: all-MiniLM-L6-v2 fine-tuned on hpo's text_classification data (the same
  tokenized tensors, from `hpo.workloads.text_classification.load_data`);
- `causal_lm`: hpo's small GPT, trained from scratch on hpo's causal_lm corpus (the Trainer side
  builds the same module through the workload and trains it as any custom `nn.Module`).
The values that hpo's shipped search spaces fix (weight decay, warmup, causal_lm's lr range) and the
workloads' option defaults are copied here so both sides match; tests keep them in step.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from hpo.errors import UserInputError

__all__ = ["WORKLOADS", "BenchWorkload", "SearchTask", "hpo_space"]


@dataclass(frozen=True)
class BenchWorkload:
    """One hpo workload as both sides run it."""

    caption: str
    lengths: dict[str, int]  # training steps per trial; "default" is the shipped space's max_steps
    options: dict[str, Any]  # hpo workload options (the Trainer side builds from the same values)
    lr: tuple[float, float]
    warmup_steps: int
    eval_batch_size: int  # the workload's own evaluation batch
    evaluation: str  # how the two sides' evaluations differ, for the report's notes


WORKLOADS = {
    "text_classification": BenchWorkload(
        caption="all-MiniLM-L6-v2 topic classification, max_length 64",
        lengths={"short": 10, "default": 150},
        # dropout and attention_dropout: TextClassificationOptions' defaults
        options={"model": "minilm", "max_length": 64, "dropout": 0.1, "attention_dropout": 0.0},
        lr=(1e-5, 1e-3),  # wider than the shipped space's, as in every earlier run of this bench
        warmup_steps=10,
        eval_batch_size=32,  # hpo.workloads.text_classification.EVAL_BATCH_SIZE
        evaluation="the same texts and batch size on both sides. hpo sorts the texts by length and cuts each batch "
        "to its longest text (text_classification's evaluation_batches); the Trainer's default collator stacks "
        "them as given, padded to max_length.",
    ),
    "causal_lm": BenchWorkload(
        caption="GPT from scratch (2 layers, d_model 128) on Python's own source, seq_len 128",
        lengths={"short": 10, "default": 120},
        options={"n_layers": 2, "d_model": 128, "seq_len": 128, "dropout": 0.0},
        lr=(3e-4, 3e-3),
        warmup_steps=0,
        eval_batch_size=16,  # hpo.workloads.causal_lm.EVAL_BATCH_SIZE
        evaluation="the same windows, batch size and loss on both sides.",
    ),
}


@dataclass(frozen=True, kw_only=True)
class SearchTask:
    """One search: `trials` trials of `steps` training steps each, on `workload`."""

    steps: int
    trials: int
    workload: str = "text_classification"
    n_eval: int = 256  # text_classification's validation texts (its n_eval option)
    batch_size: int = 16
    weight_decay: float = 0.01  # both shipped search spaces
    seed: int = 0  # TPE's seed, the Trainer's seed and hpo's study seed

    def __post_init__(self) -> None:
        if self.workload not in WORKLOADS:
            raise UserInputError(f"--task must be one of {sorted(WORKLOADS)}, got {self.workload!r}")
        for name in ("steps", "trials", "n_eval"):
            if getattr(self, name) < 1:
                raise UserInputError(f"--{name.replace('_', '-')} must be an integer >= 1, got {getattr(self, name)}")

    @property
    def spec(self) -> BenchWorkload:
        return WORKLOADS[self.workload]

    def options(self) -> dict[str, Any]:
        """The workload options both sides build the workload with."""
        extra = {"n_eval": self.n_eval} if self.workload == "text_classification" else {}
        return {**self.spec.options, **extra}

    def as_dict(self) -> dict[str, Any]:
        task = dataclasses.asdict(self)
        spec = self.spec
        return task | {
            "options": self.options(),
            "lr_low": spec.lr[0],
            "lr_high": spec.lr[1],
            "warmup_steps": spec.warmup_steps,
            "eval_batch_size": spec.eval_batch_size,
        }

    def length_name(self) -> str:
        """'short' or 'default' for those step counts, else e.g. '25-steps' (for file names)."""
        return next((name for name, steps in self.spec.lengths.items() if steps == self.steps), f"{self.steps}-steps")


def hpo_space(task: SearchTask, study: str) -> dict[str, Any]:
    """The search-space file `hpo run` gets: only lr searched, every knob fixed, no pruning."""
    low, high = task.spec.lr
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
            "name": task.workload,
            "max_steps": task.steps,
            "eval_every": task.steps,  # one evaluation, at the end
            **task.options(),
        },
        "params": {
            "lr": {"low": low, "high": high, "log": True},
            "batch_size": task.batch_size,
            "weight_decay": task.weight_decay,
            "warmup_steps": task.spec.warmup_steps,
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
