"""What each parallel knob did, seen in its own evidence, and whether that contradicts the request.

One observation and one check per knob, each on plain values:

- `bucket_cap_mb` (DDP): the sizes of one step's gradient all-reduces, each a bucket;
- `gradient_as_bucket_view` (DDP): whether the gradients live in the storage the all-reduces ran on;
- `reshard_after_forward` (FSDP2): whether the blocks' parameters are still gathered when their
  forward has ended.

An observation returns a dict of numbers; each knob's module (`hpo.knobs.systems.parallel`) checks
it against the request."""

from __future__ import annotations

import torch
from torch.distributed.tensor import DTensor

__all__ = [
    "MB",
    "bucket_sizes",
    "blocks_gathered",
    "grads_in_buckets",
    "holds_gathered_parameters",
]

MB = 2**20  # DDP's bucket_cap_mb is in MiB (`_MB_TO_BYTES` in torch.nn.parallel.distributed)


def _itemsize(dtype: str) -> int:
    return torch.empty((), dtype=getattr(torch, dtype)).element_size()


def bucket_sizes(all_reduces: list[tuple[str, int]], largest_gradient_bytes: int) -> dict:
    """One step's gradient all-reduces, given as (dtype, elements) per call: their number, their
    dtypes, the largest and the total in MB, beside the largest gradient (a bucket holds whole
    gradients)."""
    sizes = [numel * _itemsize(dtype) / MB for dtype, numel in all_reduces]
    return {
        "all_reduce_calls": len(sizes),
        "dtypes": sorted({dtype for dtype, _ in all_reduces}),
        "largest_all_reduce_mb": max(sizes, default=0.0),
        "all_reduced_mb": sum(sizes),
        "largest_gradient_mb": largest_gradient_bytes / MB,
    }


def grads_in_buckets(gradients: list[torch.Tensor], reduced_storages: set[int]) -> dict:
    """How many of the gradients (after the all-reduces, before the update) live in a storage that
    an all-reduce ran on: a bucket's, when they are views into it."""
    inside = sum(grad.untyped_storage().data_ptr() in reduced_storages for grad in gradients)
    return {"gradients": len(gradients), "gradients_in_buckets": inside}


def holds_gathered_parameters(block: torch.nn.Module) -> bool:
    """Whether a sharded block holds its gathered (plain, unsharded) parameters rather than its
    shards (DTensors): asked as its forward ends."""
    return any(not isinstance(p, DTensor) for p in block.parameters())


def blocks_gathered(after_forward: list[bool]) -> dict:
    """Of the blocks whose forward ended, how many still held their gathered parameters."""
    return {"blocks": len(after_forward), "blocks_gathered_after_forward": sum(after_forward)}
