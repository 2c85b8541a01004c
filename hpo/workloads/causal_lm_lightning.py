"""The causal LM (`causal_lm`) as a LightningModule, tuned through `LightningWorkload`: the same
GPT, corpus and metrics, trained by Lightning's Trainer. The shipped example of a Lightning workload."""

from __future__ import annotations

import math
from collections.abc import Sequence

import lightning.pytorch as pl
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, IterableDataset, TensorDataset

from hpo.knobs.attention_kernels import AttentionFn
from hpo.workloads.causal_lm import GPT, CausalLMOptions, load_corpus
from hpo.workloads.lightning import LightningWorkload
from hpo.workloads.options.causal_lm import METRICS

__all__ = ["CausalLMLightning", "GPTModule"]


class GPTModule(pl.LightningModule):
    def __init__(self, options: CausalLMOptions, attention: AttentionFn, hparams: dict):
        super().__init__()
        self.model = GPT(options, attention)
        self.lr, self.weight_decay = hparams.get("lr", 1e-3), hparams.get("weight_decay", 0.0)
        self.warmup_steps = hparams.get("warmup_steps", 0)
        self._val_losses: list[torch.Tensor] = []

    def _loss(self, tokens: torch.Tensor) -> torch.Tensor:
        logits = self.model(tokens[:, :-1])
        return F.cross_entropy(logits.float().flatten(0, 1), tokens[:, 1:].flatten())

    def training_step(self, batch, batch_idx):
        return self._loss(batch[0])

    def validation_step(self, batch, batch_idx):
        self._val_losses.append(self._loss(batch[0]).detach())

    def on_validation_epoch_end(self) -> None:
        loss = torch.stack(self._val_losses).mean().item()
        self._val_losses.clear()
        self.log_dict({"val_loss": loss, "val_perplexity": math.exp(min(loss, 50.0))})

    def configure_optimizers(self):
        optimizer = torch.optim.AdamW(self.parameters(), lr=self.lr, weight_decay=self.weight_decay)
        warmup = self.warmup_steps
        schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: 1.0 if warmup == 0 else min(1.0, (s + 1) / warmup))
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": schedule, "interval": "step"}}


class _Windows(IterableDataset):
    """Endless random windows of the training corpus, seeded like `causal_lm`'s batches."""

    def __init__(self, data: torch.Tensor, span: int, seed: int):
        self.data, self.span, self.seed = data, span, seed

    def __iter__(self):
        generator = torch.Generator().manual_seed(self.seed)
        while True:
            start = int(torch.randint(0, len(self.data) - self.span, (1,), generator=generator))
            yield (self.data[start : start + self.span],)


class CausalLMLightning(LightningWorkload):
    Options = CausalLMOptions
    metrics = METRICS

    def __init__(self, options: CausalLMOptions):
        super().__init__(options)
        corpus = load_corpus(options.corpus_bytes)
        split = int(len(corpus) * (1 - options.val_fraction))
        self.train_data, self.val_data = corpus[:split], corpus[split:]

    def build_module(self, attention: AttentionFn, hparams: dict) -> nn.Module:
        return GPTModule(self.options, attention, hparams)

    def build_loaders(self, batch_size: int, seed: int) -> tuple[DataLoader, DataLoader]:
        span = self.options.seq_len + 1
        windows = self.val_data[: (len(self.val_data) // span) * span].view(-1, span)[: self.options.eval_batches * 16]
        train = DataLoader(_Windows(self.train_data, span, seed), batch_size=batch_size)
        return train, DataLoader(TensorDataset(windows), batch_size=16)

    def checkpoint_blocks(self, model: nn.Module) -> Sequence[nn.Module]:
        return list(model.model.blocks)
