"""Gradient checkpointing knob: recompute each block's forward during backward.

Each block's bound `forward` is replaced in place (state_dict keys stay the same). The inner
forward counts its own runs, so evidence can show the recomputation happened: with checkpointing
each block runs twice per step, once in forward and once during backward.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence

import torch
from torch import nn
from torch.utils.checkpoint import checkpoint

from hpo.torch_compat import in_backward_pass


class RecomputeCounter:
    """Counts block forwards run inside backward (recomputation) and outside it."""

    def __init__(self) -> None:
        self.forward_runs = 0
        self.backward_runs = 0

    def record(self) -> None:
        if torch.compiler.is_compiling():
            return  # compiled graphs report checkpointing through their graph, not at run time
        if in_backward_pass():
            self.backward_runs += 1
        else:
            self.forward_runs += 1


def enable_checkpointing(blocks: Sequence[nn.Module], counter: RecomputeCounter) -> None:
    for block in blocks:
        block.forward = _checkpointed(block.forward, counter)


def count_block_runs(blocks: Sequence[nn.Module], counter: RecomputeCounter) -> None:
    """Count forwards without checkpointing, so the evidence for 'off' is measured the same way.
    A forward pre-hook, not a wrapper stored on the block: a wrapper holding the block's bound
    `forward` makes the block refer to itself, and a dropped model (the probe's reference) would
    stay alive, weights and all, until the next gc.collect."""
    for block in blocks:
        block.register_forward_pre_hook(lambda module, args: counter.record())


def _counted(forward, counter: RecomputeCounter):
    @functools.wraps(forward)
    def counted(*args, **kwargs):
        counter.record()
        return forward(*args, **kwargs)

    return counted


def _checkpointed(forward, counter: RecomputeCounter):
    inner = _counted(forward, counter)

    @functools.wraps(forward)
    def checkpointed(*args, **kwargs):
        if not torch.is_grad_enabled():
            return inner(*args, **kwargs)
        return checkpoint(inner, *args, use_reentrant=False, **kwargs)

    return checkpointed
