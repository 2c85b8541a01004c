"""Workloads for the probe's numeric bounds, loaded as users load theirs: `numerics_workloads:ResNet`.

`ResNet` is transformers' BatchNorm ResNet on CIFAR-shaped images, a real architecture hpo did not
write: in train mode over a small batch its normalisation amplifies rounding (bf16's gradients
differ from fp32's by 0.4-0.6), though bf16 trains it as fp32 does. `ResNet` with `norm: layer`
is transformers' ConvNeXt, the same shapes with LayerNorm. `SkewedToy` is the toy transformer
with an attention kernel that is 10% wrong under autocast: a broken low-precision kernel whose
error stays under any one constant loose enough for the ResNet.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Literal

import torch
import torch.nn.functional as F
from torch import nn

from hpo.knobs.attention_kernels import attention_function
from hpo.workloads.base import Batch, MoveFn, Workload, WorkloadOptions
from toy_workloads import Toy, ToyModel


@dataclass(frozen=True, kw_only=True)
class ResNetOptions(WorkloadOptions):
    norm: Literal["batch", "layer"] = "batch"
    width: int = 16
    classes: int = 10


class ResNet(Workload):
    Options = ResNetOptions
    metrics = {"val_loss": "minimize"}
    model_reads_hparams = False

    def build_model(self, attention: str) -> nn.Module:
        from transformers import ConvNextConfig, ConvNextForImageClassification, ResNetConfig, ResNetForImageClassification

        w, classes = self.options.width, self.options.classes
        if self.options.norm == "batch":
            config = ResNetConfig(
                embedding_size=w, hidden_sizes=[w, 2 * w, 4 * w, 8 * w], depths=[1, 1, 1, 1], num_labels=classes
            )
            return ResNetForImageClassification(config)
        return ConvNextForImageClassification(
            ConvNextConfig(hidden_sizes=[w, 2 * w, 4 * w, 8 * w], depths=[1, 1, 1, 1], num_labels=classes)
        )

    def checkpoint_blocks(self, model: nn.Module) -> Sequence[nn.Module]:
        inner = model.resnet if self.options.norm == "batch" else model.convnext
        return list(inner.encoder.stages)

    def _batch(self, generator: torch.Generator, size: int) -> Batch:
        images = torch.randn(size, 3, 32, 32, generator=generator)
        # A label the images determine, so a few steps can lower the loss.
        labels = (images[:, 0].mean(dim=(1, 2)) > 0).long() + 2 * (images[:, 1].mean(dim=(1, 2)) > 0).long()
        return {"pixel_values": images, "labels": labels}

    def train_batches(self, batch_size: int, seed: int) -> Iterator[Batch]:
        generator = torch.Generator().manual_seed(seed)
        while True:
            yield self._batch(generator, batch_size)

    def training_loss(self, model: nn.Module, batch: Batch) -> torch.Tensor:
        return F.cross_entropy(model(pixel_values=batch["pixel_values"]).logits.float(), batch["labels"])

    def evaluate(self, model: nn.Module, move: MoveFn) -> dict[str, float]:
        return {"val_loss": self.training_loss(model, move(self._batch(torch.Generator().manual_seed(1234), 64))).item()}


def _skewed_under_autocast(attention):
    def skewed(q, k, v):
        out = attention(q, k, v)
        return out * 1.1 if torch.is_autocast_enabled(q.device.type) else out

    return skewed


class SkewedToy(Toy):
    """The toy transformer whose attention output is 10% too large whenever autocast is on."""

    def build_model(self, attention: str) -> nn.Module:
        return ToyModel(self.options, _skewed_under_autocast(attention_function(attention)))
