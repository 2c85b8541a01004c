"""An audio model from transformers: Wav2Vec2 classifying 1 s of 16 kHz sound, tiny and randomly
initialised. Its convolutional feature encoder (GroupNorm on the first layer) turns 16000 samples
into 49 frames; a transformer encoder attends over them.

Each class is a tone of its own pitch under noise, at a random phase and loudness.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from examples.zoo.hf import HFWorkload
from hpo.workloads.base import Batch

__all__ = ["Wav2Vec2"]

CLASSES, RATE, SECONDS = 4, 16_000, 1.0
PITCH_HZ = (220.0, 330.0, 440.0, 660.0)


def tones(n: int, generator: torch.Generator) -> Batch:
    labels = torch.randint(0, CLASSES, (n,), generator=generator)
    t = torch.arange(int(RATE * SECONDS)) / RATE
    phase = 2 * math.pi * torch.rand(n, 1, generator=generator)
    loudness = 0.5 + torch.rand(n, 1, generator=generator)
    wave = loudness * torch.sin(2 * math.pi * torch.tensor(PITCH_HZ)[labels, None] * t + phase)
    return {"input_values": wave + 0.3 * torch.randn(wave.shape, generator=generator), "labels": labels}


class Wav2Vec2(HFWorkload):
    def model(self, impl: str) -> nn.Module:
        from transformers import Wav2Vec2Config, Wav2Vec2ForSequenceClassification

        o = self.options
        config = Wav2Vec2Config(
            hidden_size=o.hidden, num_hidden_layers=o.layers, num_attention_heads=o.heads, intermediate_size=2 * o.hidden,
            conv_dim=(16,) * 7, num_conv_pos_embeddings=16, num_conv_pos_embedding_groups=4, num_labels=CLASSES,
            classifier_proj_size=o.hidden, hidden_dropout=0.0, attention_dropout=0.0, activation_dropout=0.0,
            feat_proj_dropout=0.0, final_dropout=0.0, layerdrop=0.0, mask_time_prob=0.0, mask_feature_prob=0.0,
        )  # fmt: skip
        return Wav2Vec2ForSequenceClassification._from_config(config, attn_implementation=impl)

    def batch(self, n: int, generator: torch.Generator) -> Batch:
        return tones(n, generator)
