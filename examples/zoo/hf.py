"""What every transformers model of the zoo shares: built from a small config with random weights
(nothing downloaded), with hpo's attention name mapped onto transformers' `attn_implementation`,
the blocks transformers itself would recompute, and a loss on a held-out batch as the metric.

A subclass says which model class and config to build (`model`) and what its batches are
(`batch`); everything else is the `Workload` protocol of docs/workloads.md.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

import torch
from torch import nn

from hpo.errors import KnobUnavailable
from hpo.workloads.base import Batch, MoveFn, Workload, WorkloadOptions
from hpo.workloads.hf_common import checkpoint_layers
from hpo.workloads.text_classification import hf_attention_implementation, quiet_transformers

__all__ = ["EVAL_SEED", "HFOptions", "HFWorkload"]

EVAL_SEED = 1234  # the held-out batch: drawn from its own seed, never a training batch
EVAL_SAMPLES = 32


@dataclass(frozen=True, kw_only=True)
class HFOptions(WorkloadOptions):
    hidden: int = 32
    layers: int = 2
    heads: int = 4


class HFWorkload(Workload):
    """A transformers model built from its config. Subclasses define `model(impl)` and `batch(n, g)`."""

    Options = HFOptions
    metrics = {"val_loss": "minimize"}
    model_reads_hparams = False

    def model(self, impl: str) -> nn.Module:
        """The model, built with `attn_implementation=impl` from a small config."""
        raise NotImplementedError

    def batch(self, n: int, generator: torch.Generator) -> Batch:
        """`n` samples drawn with `generator`."""
        raise NotImplementedError

    def build_model(self, attention: str) -> nn.Module:
        impl = hf_attention_implementation(attention)  # the SDPA kernels all map to "sdpa"; hpo pins the kernel
        try:
            model = self.seeded(self.model, impl)
        except ValueError as exc:  # transformers refuses an implementation the model class lacks
            if "attention" not in str(exc).lower():
                raise
            detail = " ".join(str(exc).split())[:200]
            raise KnobUnavailable(
                f"attention={attention}: transformers refused {impl!r}: {detail}", [("attention", attention)]
            ) from None
        got = model.config._attn_implementation
        if got != impl:  # never a quiet fallback: the trial would record a kernel that did not run
            raise KnobUnavailable(
                f"attention={attention} asked transformers for {impl!r}, which set {got!r}", [("attention", attention)]
            )
        return model

    def seeded(self, build: Callable[..., nn.Module], *args) -> nn.Module:
        """`build(*args)` under the options' seed, drawn from a forked RNG: same seed, same weights,
        whatever ran before, and the caller's random state untouched."""
        with quiet_transformers(), torch.random.fork_rng(devices=[]):
            torch.manual_seed(self.options.seed)
            return build(*args)

    def checkpoint_blocks(self, model: nn.Module) -> Sequence[nn.Module]:
        return checkpoint_layers(model)

    def train_batches(self, batch_size: int, seed: int) -> Iterator[Batch]:
        generator = torch.Generator().manual_seed(seed)
        while True:
            yield self.batch(batch_size, generator)

    def training_loss(self, model: nn.Module, batch: Batch) -> torch.Tensor:
        return model(**batch).loss.float()

    def evaluate(self, model: nn.Module, move: MoveFn) -> dict[str, float]:
        batch = move(self.batch(EVAL_SAMPLES, torch.Generator().manual_seed(EVAL_SEED)))
        return {"val_loss": self.training_loss(model, batch).item()}
