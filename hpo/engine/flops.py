"""Model FLOPs per training sample, counted on a real forward and backward step.

`torch.utils.flop_counter.FlopCounterMode` counts matmul-class ops. In torch 2.13 it has no formula
for the CPU SDPA kernel, so the count runs on the workload's model built with the eager (matmul +
softmax) attention path, whose matmuls it does count; a model's FLOPs do not depend on the kernel
that computes them. The model is plain: no checkpointing (recomputation is hardware work, not model
work) and no compile. fp32, so the count does not depend on the trial's precision either.
"""

from __future__ import annotations

import torch

from hpo.workloads.base import Batch, Workload

__all__ = ["model_flops_per_sample"]


def model_flops_per_sample(workload: Workload, batch: Batch) -> float:
    """FLOPs of one forward and backward pass per sample of `batch` (a CPU batch of the trial's
    size). Builds its own eager-attention model and restores the RNG state, so the trial that
    follows sees the same random numbers as without the count."""
    from torch.utils.flop_counter import FlopCounterMode

    rng = torch.random.get_rng_state()
    try:
        model = workload.build_model("eager")
        model.train()
        counter = FlopCounterMode(display=False)
        with counter:
            workload.training_loss(model, batch).backward()
    finally:
        torch.random.set_rng_state(rng)
    return counter.get_total_flops() / workload.samples_in(batch)
