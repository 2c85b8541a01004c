"""Which samples the probe's compared step runs on: few (numerics and kernel choice need real data,
not much of it), more for a model that normalises over the batch, the whole batch for a compiled
model (`hpo.verify.probing._probe`)."""

from __future__ import annotations

import torch

from hpo.config.trial import TrialConfig
from hpo.torch_compat import normalizes_over_the_batch
from hpo.workloads.base import Batch, Workload

__all__ = ["BATCH_STATISTICS_SAMPLES", "PROBE_SAMPLES", "compared_batch", "compared_samples"]

PROBE_SAMPLES = 4
# BatchNorm's gradient error under bf16 on a ResNet: 0.57 over 4 samples, 0.36 over 16, 0.40 over 32
# (a GroupNorm or LayerNorm model: under 0.01 at any of them). 16 gives its statistics a fair batch
# at a quarter of a default batch's cost.
BATCH_STATISTICS_SAMPLES = 16


def compared_samples(config: TrialConfig, model: torch.nn.Module) -> int:
    """How many samples the compared step runs on: PROBE_SAMPLES, BATCH_STATISTICS_SAMPLES for a
    model whose layers normalise over the batch, or the whole batch for a compiled model, which is
    specialised to the shapes it trains on."""
    batch_size = config.training.batch_size
    if config.knobs.compile:
        return batch_size
    statistics = any(normalizes_over_the_batch(module) for module in model.modules())
    return min(BATCH_STATISTICS_SAMPLES if statistics else PROBE_SAMPLES, batch_size)


def compared_batch(workload: Workload, config: TrialConfig, batch: Batch, samples: int) -> Batch:
    if samples == config.training.batch_size:
        return batch
    return next(workload.train_batches(samples, config.seed))
