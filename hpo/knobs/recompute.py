"""Gradient checkpointing knob: recompute each block's forward during backward.

Each block's bound `forward` is replaced in place (state_dict keys stay the same). The inner
forward counts its own runs, so evidence can show the recomputation happened: with checkpointing
each block runs twice per step, once in forward and once during backward.

The recomputation runs in train mode, so BatchNorm (and any module that keeps a running average in
a buffer) would update its running statistics a second time each step: `num_batches_tracked` would
count 2 per step and the model would evaluate with statistics no unchecked run has. The
recomputation puts the block's running buffers back as the forward left them.
Its outputs are unchanged: BatchNorm in train mode normalizes with the batch's own statistics.
Compiled graphs need none of this: functionalization applies a buffer's update once, in forward.
(torch leaves it to the caller: pytorch/pytorch#96136.)
"""

from __future__ import annotations

import functools
from collections.abc import Sequence

import torch
from torch import nn
from torch.utils.checkpoint import checkpoint

from hpo.knobs.model_hooks import Assembly, ModelHook
from hpo.torch_compat import in_backward_pass, tensor_version


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
        block.forward = _checkpointed(block, counter)


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


class _RunningBuffers:
    """The buffers a block's forward updates in place, so its recomputation can put them back: the
    running statistics of its norm layers (named, as BatchNorm's kernels write them without moving
    their version counter, torch 2.13), and any other buffer whose version counter the forward
    moved (a running average kept by `add_`/`mul_`, an observer's count)."""

    def __init__(self) -> None:
        self.written: tuple[str, ...] = ()

    def run(self, block: nn.Module, forward, /, *args, **kwargs):
        if torch.compiler.is_compiling():
            return forward(*args, **kwargs)
        if in_backward_pass():
            return self._recompute(block, forward, *args, **kwargs)
        before = _versions(block)
        out = forward(*args, **kwargs)
        self.written = tuple(name for name, version in _versions(block).items() if before.get(name, version) != version)
        return out

    def _recompute(self, block: nn.Module, forward, /, *args, **kwargs):
        buffers = dict(block.named_buffers())
        names = {*self.written, *_norm_statistics(block)} & buffers.keys()
        kept = {name: buffers[name].clone() for name in names}
        try:
            return forward(*args, **kwargs)
        finally:  # also when checkpoint stops the recomputation early, once it has what backward needs
            with torch.no_grad():
                for name, value in kept.items():
                    buffers[name].copy_(value)


def _versions(block: nn.Module) -> dict[str, tuple[int, int]]:
    """Each buffer's identity and version: a buffer replaced by a new tensor was not written in place."""
    return {name: (id(buffer), tensor_version(buffer)) for name, buffer in block.named_buffers()}


def _norm_statistics(block: nn.Module) -> list[str]:
    """The running statistics of the block's norm layers that track them (BatchNorm, InstanceNorm
    with track_running_stats): running_mean, running_var, num_batches_tracked."""
    return [
        f"{prefix}.{name}" if prefix else name
        for prefix, module in block.named_modules()
        if getattr(module, "track_running_stats", False) is True
        for name, _ in module.named_buffers(recurse=False)
    ]


def _checkpointed(block: nn.Module, counter: RecomputeCounter):
    forward = block.forward
    inner = functools.partial(_RunningBuffers().run, block, _counted(forward, counter))

    @functools.wraps(forward)
    def checkpointed(*args, **kwargs):
        if not torch.is_grad_enabled():
            return inner(*args, **kwargs)
        return checkpoint(inner, *args, use_reentrant=False, **kwargs)

    return checkpointed


class CheckpointingHook(ModelHook):
    """`systems.grad_checkpointing` applied to the workload's checkpoint blocks; off, their runs are
    counted the same way, so the evidence for off is measured too, unless compile is on (compiled
    graphs show checkpointing themselves; a wrapper would only add frames)."""

    def apply_to_model(self, assembly: Assembly, value: bool) -> None:
        blocks = assembly.workload.checkpoint_blocks(assembly.model)
        if value:
            enable_checkpointing(blocks, assembly.recompute)
        elif not assembly.values.get("compile"):
            count_block_runs(blocks, assembly.recompute)


CHECKPOINTING_HOOK = CheckpointingHook()
