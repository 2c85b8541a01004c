"""Vision models from transformers on CIFAR-shaped images (3x32x32, 10 classes), tiny and randomly
initialised: a vision transformer (ViT), a residual network with BatchNorm (ResNet) and a
ConvNeXt (LayerNorm, depthwise convolutions).

The images are synthetic: each class has a fixed pattern, and an image is its class's pattern under
noise, so a model learns in a few steps. The convolutional networks have no attention: the
attention knob changes nothing in them, and hpo's evidence says so.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn

from examples.zoo.hf import HFWorkload
from hpo.workloads.base import Batch

__all__ = ["ConvNeXt", "ResNet", "ViT"]

CLASSES, IMAGE = 10, (3, 32, 32)
PATTERN_SEED = 7


def cifar_shaped(n: int, generator: torch.Generator) -> Batch:
    """`n` images of a random class each: its pattern plus as much noise."""
    patterns = torch.randn(CLASSES, *IMAGE, generator=torch.Generator().manual_seed(PATTERN_SEED))
    labels = torch.randint(0, CLASSES, (n,), generator=generator)
    return {"pixel_values": patterns[labels] + torch.randn(n, *IMAGE, generator=generator), "labels": labels}


class _Images(HFWorkload):
    def batch(self, n: int, generator: torch.Generator) -> Batch:
        return cifar_shaped(n, generator)


class _ConvNet(_Images):
    """A network without attention: transformers refuses any `attn_implementation` but eager for
    it, and there is nothing for the knob to switch, so the model is built the same for every value."""

    def build_model(self, attention: str) -> nn.Module:
        return self.seeded(self.model)


class ViT(_Images):
    def model(self, impl: str) -> nn.Module:
        from transformers import ViTConfig, ViTForImageClassification

        o = self.options
        config = ViTConfig(
            image_size=IMAGE[1], patch_size=8, num_channels=IMAGE[0], hidden_size=o.hidden, num_hidden_layers=o.layers,
            num_attention_heads=o.heads, intermediate_size=2 * o.hidden, num_labels=CLASSES,
            hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0,
        )  # fmt: skip
        return ViTForImageClassification._from_config(config, attn_implementation=impl)


class ResNet(_ConvNet):
    """BatchNorm after every convolution: its statistics come from the batch in train mode."""

    def model(self) -> nn.Module:
        from transformers import ResNetConfig, ResNetForImageClassification

        o = self.options
        config = ResNetConfig(
            num_channels=IMAGE[0], embedding_size=o.hidden // 2, hidden_sizes=[o.hidden // 2, o.hidden],
            depths=[1] * o.layers, layer_type="basic", downsample_in_first_stage=False, num_labels=CLASSES,
        )  # fmt: skip
        return ResNetForImageClassification(config)

    def checkpoint_blocks(self, model: nn.Module) -> Sequence[nn.Module]:
        # transformers' ResNet has no checkpointing layers of its own; a user recomputes its stages.
        return list(model.resnet.encoder.stages)


class ConvNeXt(_ConvNet):
    """LayerNorm over channels, 7x7 depthwise convolutions."""

    def model(self) -> nn.Module:
        from transformers import ConvNextConfig, ConvNextForImageClassification

        o = self.options
        config = ConvNextConfig(
            num_channels=IMAGE[0], patch_size=2, hidden_sizes=[o.hidden // 2, o.hidden], depths=[1] * o.layers,
            num_stages=o.layers, num_labels=CLASSES, drop_path_rate=0.0,
        )  # fmt: skip
        return ConvNextForImageClassification(config)

    def checkpoint_blocks(self, model: nn.Module) -> Sequence[nn.Module]:
        return list(model.convnext.encoder.stages)
