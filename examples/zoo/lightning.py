"""LightningModules tuned through `LightningWorkload` (docs/lightning.md), on the CIFAR-shaped
images of `examples.zoo.vision`: a patch transformer whose attention is hpo's attention function,
and a convolutional network with BatchNorm. Trials train them with Lightning's own Trainer.

    workload: {name: "examples.zoo.lightning:LitConvNet"}
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import lightning.pytorch as pl
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from examples.zoo.vision import CLASSES, IMAGE, cifar_shaped
from hpo.knobs.attention_kernels import AttentionFn
from hpo.workloads.base import WorkloadOptions
from hpo.workloads.lightning import LightningWorkload

__all__ = ["LitConvNet", "LitPatchTransformer"]

TRAIN_IMAGES, VAL_IMAGES, VAL_SEED = 512, 128, 1234


@dataclass(frozen=True, kw_only=True)
class LitOptions(WorkloadOptions):
    hidden: int = 32
    layers: int = 2
    heads: int = 4
    patch: int = 8


class Attention(nn.Module):
    def __init__(self, hidden: int, heads: int, attention: AttentionFn):
        super().__init__()
        self.heads, self.attention = heads, attention
        self.qkv, self.out = nn.Linear(hidden, 3 * hidden), nn.Linear(hidden, hidden)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, s, d = x.shape
        q, k, v = self.qkv(x).view(b, s, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        return self.out(self.attention(q, k, v).transpose(1, 2).reshape(b, s, d))


class Block(nn.Module):
    """Pre-norm transformer block."""

    def __init__(self, hidden: int, heads: int, attention: AttentionFn):
        super().__init__()
        self.norm1, self.norm2 = nn.LayerNorm(hidden), nn.LayerNorm(hidden)
        self.attention = Attention(hidden, heads, attention)
        self.mlp = nn.Sequential(nn.Linear(hidden, 2 * hidden), nn.GELU(), nn.Linear(2 * hidden, hidden))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attention(self.norm1(x))
        return x + self.mlp(self.norm2(x))


class _Classifier(pl.LightningModule):
    """Cross-entropy on (images, labels) batches; `val_loss` and `val_accuracy` per validation."""

    def __init__(self, lr: float):
        super().__init__()
        self.lr = lr

    def training_step(self, batch, batch_idx):
        images, labels = batch
        return F.cross_entropy(self(images).float(), labels)

    def validation_step(self, batch, batch_idx):
        images, labels = batch
        logits = self(images).float()
        self.log("val_loss", F.cross_entropy(logits, labels))
        self.log("val_accuracy", (logits.argmax(-1) == labels).float().mean())

    def configure_optimizers(self):
        return torch.optim.AdamW(self.parameters(), lr=self.lr)


class PatchTransformer(_Classifier):
    def __init__(self, o: LitOptions, attention: AttentionFn, lr: float):
        super().__init__(lr)
        self.embed = nn.Conv2d(IMAGE[0], o.hidden, kernel_size=o.patch, stride=o.patch)
        self.position = nn.Parameter(torch.zeros(1, (IMAGE[1] // o.patch) ** 2, o.hidden))
        self.blocks = nn.ModuleList(Block(o.hidden, o.heads, attention) for _ in range(o.layers))
        self.norm, self.head = nn.LayerNorm(o.hidden), nn.Linear(o.hidden, CLASSES)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        x = self.embed(images).flatten(2).transpose(1, 2) + self.position
        for block in self.blocks:
            x = block(x)
        return self.head(self.norm(x).mean(1))


def conv_bn(c_in: int, c_out: int) -> nn.Sequential:
    return nn.Sequential(nn.Conv2d(c_in, c_out, 3, padding=1, bias=False), nn.BatchNorm2d(c_out), nn.ReLU(), nn.MaxPool2d(2))


class ConvNet(_Classifier):
    def __init__(self, o: LitOptions, lr: float):
        super().__init__(lr)
        widths = [IMAGE[0]] + [o.hidden // 2 ** (o.layers - 1 - i) for i in range(o.layers)]
        self.stages = nn.ModuleList(conv_bn(a, b) for a, b in zip(widths, widths[1:]))
        self.head = nn.Linear(o.hidden, CLASSES)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        for stage in self.stages:
            images = stage(images)
        return self.head(images.mean((2, 3)))


class _LitImages(LightningWorkload):
    Options = LitOptions
    metrics = {"val_loss": "minimize", "val_accuracy": "maximize"}

    def build_loaders(self, batch_size: int, seed: int) -> tuple[DataLoader, DataLoader]:
        train, val = (
            cifar_shaped(TRAIN_IMAGES, torch.Generator().manual_seed(seed)),
            cifar_shaped(VAL_IMAGES, torch.Generator().manual_seed(VAL_SEED)),
        )
        shuffle = torch.Generator().manual_seed(seed)
        train_loader = DataLoader(
            TensorDataset(train["pixel_values"], train["labels"]),
            batch_size=batch_size,
            shuffle=True,
            generator=shuffle,
            drop_last=True,
        )
        return train_loader, DataLoader(TensorDataset(val["pixel_values"], val["labels"]), batch_size=64)

    def seeded(self, build, *args) -> nn.Module:
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(self.options.seed)
            return build(*args)


class LitPatchTransformer(_LitImages):
    def build_module(self, attention: AttentionFn, hparams: dict) -> nn.Module:
        return self.seeded(PatchTransformer, self.options, attention, hparams.get("lr", 1e-3))

    def checkpoint_blocks(self, model: nn.Module) -> Sequence[nn.Module]:
        return list(model.blocks)


class LitConvNet(_LitImages):
    """BatchNorm after every convolution. It has no attention: the knob changes nothing in it."""

    def build_module(self, attention: AttentionFn, hparams: dict) -> nn.Module:
        return self.seeded(ConvNet, self.options, hparams.get("lr", 1e-3))

    def checkpoint_blocks(self, model: nn.Module) -> Sequence[nn.Module]:
        return list(model.stages)
