"""Options and metrics of the built-in `causal_lm` workload (model: hpo.workloads.causal_lm)."""

from __future__ import annotations

from dataclasses import dataclass

from hpo.workloads.options import WorkloadOptions

__all__ = ["METRICS", "EXTRA", "PACKAGES", "CausalLMOptions", "Options"]

METRICS = {"val_loss": "minimize", "val_perplexity": "minimize"}
PACKAGES = ()  # hpo's core only: its text is the Python standard library's source
EXTRA = None


@dataclass(frozen=True, kw_only=True)
class CausalLMOptions(WorkloadOptions):
    n_layers: int = 2
    n_heads: int = 4
    d_model: int = 128
    seq_len: int = 128
    dropout: float = 0.0
    corpus_bytes: int = 400_000
    val_fraction: float = 0.1
    eval_batches: int = 8

    def __post_init__(self) -> None:
        if self.d_model % self.n_heads:
            raise ValueError(f"d_model must be divisible by n_heads, got d_model={self.d_model}, n_heads={self.n_heads}")
        if not 0.0 <= self.dropout < 1.0:
            raise ValueError(f"dropout must be in [0, 1), got {self.dropout}")
        if not 0.0 < self.val_fraction < 0.5:
            raise ValueError(f"val_fraction must be in (0, 0.5), got {self.val_fraction}")
        if min(self.n_layers, self.seq_len, self.corpus_bytes, self.eval_batches) < 1:
            raise ValueError("n_layers, seq_len, corpus_bytes and eval_batches must be >= 1")


Options = CausalLMOptions
