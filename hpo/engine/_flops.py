"""Model FLOPs per training sample, counted on a real forward and backward step.

The probe counts them on its reference's compared step, which runs the eager-attention fp32 model
anyway (`counting_flops`); `model_flops_per_sample` builds a model of its own for the cases it
did not (a verdict taken from the cache, a compiled trial compared on its whole batch).

`torch.utils.flop_counter.FlopCounterMode` counts matmul-class ops. In torch 2.13 it has no formula
for the CPU SDPA kernel, so the count runs on the workload's model built with the eager (matmul +
softmax) attention path, whose matmuls it does count; a model's FLOPs do not depend on the kernel
that computes them. The model is plain: no checkpointing (recomputation is hardware work, not model
work) and no compile. fp32, so the count does not depend on the trial's precision either.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass

import torch

from hpo.workloads.base import Batch, Workload

__all__ = ["FlopCount", "counting_flops", "model_flops_per_sample"]


@dataclass
class FlopCount:
    """The FLOPs counted in a `counting_flops` block, once it has ended."""

    total: float = 0.0


@contextlib.contextmanager
def counting_flops() -> Iterator[FlopCount]:
    """Count the matmul-class FLOPs of what runs inside (on an eager-attention model: see above)."""
    from torch.utils.flop_counter import FlopCounterMode

    count, counter = FlopCount(), FlopCounterMode(display=False)
    with counter:
        yield count
    count.total = float(counter.get_total_flops())


def model_flops_per_sample(workload: Workload, batch: Batch) -> float:
    """FLOPs of one forward and backward pass per sample of `batch` (a CPU batch of the trial's
    size). Builds its own eager-attention model and restores the RNG state, so the trial that
    follows sees the same random numbers as without the count."""
    rng = torch.random.get_rng_state()
    try:
        model = workload.build_model("eager")
        model.train()
        with counting_flops() as count:
            workload.training_loss(model, batch).backward()
    finally:
        torch.random.set_rng_state(rng)
    return count.total / workload.samples_in(batch)
