"""The toy model `scripts/gpu-session --toy` runs every step with on a CPU: hpo's causal_lm at the
smallest size, so that a test runs the whole session in minutes. Named by `package.module:Class`,
as a user's own workload is."""

from __future__ import annotations

from dataclasses import dataclass

from hpo.workloads.causal_lm import CausalLM
from hpo.workloads.options.causal_lm import CausalLMOptions

__all__ = ["ToyCausalLM", "ToyOptions"]


@dataclass(frozen=True, kw_only=True)
class ToyOptions(CausalLMOptions):
    n_layers: int = 1
    n_heads: int = 2
    d_model: int = 32
    seq_len: int = 32
    corpus_bytes: int = 40_000
    eval_batches: int = 1


class ToyCausalLM(CausalLM):
    Options = ToyOptions
