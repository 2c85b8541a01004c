"""Small, fast workloads for tests, loaded the way users load theirs: `toy_workloads:Toy`.

`Toy` learns whether a sequence's first token is larger than its last, through one attention block,
so every knob has something to act on. Options make it misbehave on purpose: `overflow` scales
activations past fp16's range (65504) while bf16 and fp32 cope, `nan_at_step` makes the loss NaN,
`loss_scale` blows gradients past fp16's range, `index_add_residual` sends mixed dtypes to a kernel.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from hpo.knobs.attention_kernels import attention_function
from hpo.verify.probing._probe import PROBE_SAMPLES
from hpo.workloads.base import Batch, MoveFn, Workload, WorkloadOptions


@dataclass(frozen=True, kw_only=True)
class ToyOptions(WorkloadOptions):
    d_model: int = 32
    n_heads: int = 2
    seq_len: int = 16
    vocab: int = 32
    n_blocks: int = 2
    dropout: float = 0.0
    overflow: float = 1.0
    nan_at_step: int = -1
    loss_scale: float = 1.0
    index_add_residual: bool = False


class Block(nn.Module):
    def __init__(self, opts: ToyOptions, attention):
        super().__init__()
        self.opts, self.attention = opts, attention
        self.qkv = nn.Linear(opts.d_model, 3 * opts.d_model)
        self.out = nn.Linear(opts.d_model, opts.d_model)
        self.norm = nn.LayerNorm(opts.d_model)
        # Only when asked: a Dropout module draws from the RNG, which would change every other test.
        self.dropout = nn.Dropout(opts.dropout) if opts.dropout > 0 else nn.Identity()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, s, d = x.shape
        q, k, v = self.qkv(x).view(b, s, 3, self.opts.n_heads, d // self.opts.n_heads).permute(2, 0, 3, 1, 4)
        att = self.attention(q, k, v).transpose(1, 2).reshape(b, s, d)
        update = self.dropout(self.out(att)) * self.opts.overflow
        if self.opts.index_add_residual:
            # index_add_ is outside autocast's cast lists: a bf16/fp16 source meets an fp32 target.
            rows = torch.arange(b, device=x.device)
            return self.norm(x.clone().index_add_(0, rows, update))
        # `overflow` pushes the pre-norm activations past fp16's maximum; LayerNorm would undo it.
        return self.norm(x + update)


class ToyModel(nn.Module):
    def __init__(self, opts: ToyOptions, attention):
        super().__init__()
        self.embed = nn.Embedding(opts.vocab, opts.d_model)
        self.blocks = nn.ModuleList(Block(opts, attention) for _ in range(opts.n_blocks))
        self.head = nn.Linear(opts.d_model, 2)
        self.steps = 0

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        x = self.embed(tokens)
        for block in self.blocks:
            x = block(x)
        return self.head(x.mean(dim=1))


class Toy(Workload):
    Options = ToyOptions
    metrics = {"val_accuracy": "maximize", "val_loss": "minimize"}

    def build_model(self, attention: str) -> nn.Module:
        return ToyModel(self.options, attention_function(attention))

    def checkpoint_blocks(self, model: nn.Module) -> Sequence[nn.Module]:
        return list(model.blocks)

    def _batch(self, generator: torch.Generator, size: int) -> Batch:
        tokens = torch.randint(0, self.options.vocab, (size, self.options.seq_len), generator=generator)
        return {"tokens": tokens, "labels": (tokens[:, 0] > tokens[:, -1]).long()}

    def train_batches(self, batch_size: int, seed: int) -> Iterator[Batch]:
        generator = torch.Generator().manual_seed(seed)
        while True:
            yield self._batch(generator, batch_size)

    def training_loss(self, model: nn.Module, batch: Batch) -> torch.Tensor:
        loss = F.cross_entropy(model(batch["tokens"]).float(), batch["labels"]) * self.options.loss_scale
        # Training steps only: the probe's compared step (train mode too) runs on PROBE_SAMPLES samples.
        if model.training and self.options.nan_at_step >= 0 and batch["tokens"].shape[0] != PROBE_SAMPLES:
            inner = getattr(model, "_orig_mod", model)
            if inner.steps == self.options.nan_at_step:
                loss = loss * float("nan")
            inner.steps += 1
        return loss

    def evaluate(self, model: nn.Module, move: MoveFn) -> dict[str, float]:
        batch = move(self._batch(torch.Generator().manual_seed(12345), 256))
        logits = model(batch["tokens"]).float()
        return {
            "val_accuracy": (logits.argmax(-1) == batch["labels"]).float().mean().item(),
            "val_loss": F.cross_entropy(logits, batch["labels"]).item(),
        }


class PretrainedToy(Toy):
    """Built in eval mode, as transformers' `from_pretrained` returns models; records the mode each
    training forward ran in (`TRAINING_MODES`)."""

    TRAINING_MODES: list[bool] = []

    def build_model(self, attention: str) -> nn.Module:
        return super().build_model(attention).eval()

    def training_loss(self, model: nn.Module, batch: Batch) -> torch.Tensor:
        PretrainedToy.TRAINING_MODES.append(model.training)
        return super().training_loss(model, batch)


class HparamFreeToy(Toy):
    """`Toy`, declaring that its model and loss never read the training hyperparameters."""

    model_reads_hparams = False


class AttentionIgnoringToy(Toy):
    """`Toy` wrapped as a model that ignores the attention knob: SDPA whatever is asked, as a Whisper
    wrapper that lets transformers choose its attention builds SDPA."""

    def build_model(self, attention: str) -> nn.Module:
        return ToyModel(self.options, attention_function("sdpa"))
