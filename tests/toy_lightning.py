"""A small LightningWorkload for tests, written the way a user writes one: `toy_lightning:ToyLightning`."""

from __future__ import annotations

from dataclasses import dataclass

import lightning.pytorch as pl
import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

from hpo.verify.probing._probe import PROBE_SAMPLES
from hpo.workloads.lightning import LightningWorkload
from toy_workloads import ToyModel, ToyOptions


@dataclass(frozen=True, kw_only=True)
class ToyLightningOptions(ToyOptions):
    optimizer_class: str = "AdamW"


class ToyModule(pl.LightningModule):
    def __init__(self, options: ToyLightningOptions, attention, hparams: dict):
        super().__init__()
        self.options, self.net, self.lr = options, ToyModel(options, attention), hparams.get("lr", 1e-3)
        self.steps = 0

    def training_step(self, batch, batch_idx):
        tokens, labels = batch
        loss = F.cross_entropy(self.net(tokens).float(), labels)
        if self.training and len(tokens) != PROBE_SAMPLES:  # Lightning's steps; not the probe's compared step
            if self.options.nan_at_step == self.steps:
                loss = loss * float("nan")
            self.steps += 1
        return loss

    def validation_step(self, batch, batch_idx):
        tokens, labels = batch
        logits = self.net(tokens).float()
        self.log("val_loss", F.cross_entropy(logits, labels))
        self.log("val_accuracy", (logits.argmax(-1) == labels).float().mean())

    def configure_optimizers(self):
        return getattr(torch.optim, self.options.optimizer_class)(self.parameters(), lr=self.lr)


class ToyLightning(LightningWorkload):
    Options = ToyLightningOptions
    metrics = {"val_accuracy": "maximize", "val_loss": "minimize"}

    def _data(self, n: int, seed: int) -> TensorDataset:
        g = torch.Generator().manual_seed(seed)
        tokens = torch.randint(0, self.options.vocab, (n, self.options.seq_len), generator=g)
        return TensorDataset(tokens, (tokens[:, 0] > tokens[:, -1]).long())

    def build_module(self, attention, hparams):
        return ToyModule(self.options, attention, hparams)

    def build_loaders(self, batch_size, seed):
        shuffled = torch.Generator().manual_seed(seed)
        train = DataLoader(self._data(512, seed), batch_size=batch_size, shuffle=True, generator=shuffled, drop_last=True)
        return train, DataLoader(self._data(128, 12345), batch_size=64)

    def checkpoint_blocks(self, model):
        return list(model.net.blocks)
