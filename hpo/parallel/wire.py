"""What crossed the wire: every collective the process group ran, seen at the dispatcher
(`c10d::allreduce_`, `_reduce_scatter_base_`, ...) with the dtype and size of its tensors. This is
the evidence for the parallel knobs: the reduce dtype is the dtype the gradients were reduced in,
not the one asked for, and `bucket_cap_mb` shows as the number and size of the all-reduces."""

from __future__ import annotations

from collections import defaultdict

import torch

from hpo.torch_compat import TorchDispatchMode

__all__ = ["COLLECTIVE_OPS", "CollectiveRecorder"]

# c10d's dispatcher ops (torch/csrc/distributed/c10d/Ops.cpp) -> the collective they are.
COLLECTIVE_OPS = {
    "allreduce_": "all_reduce",
    "allreduce_coalesced_": "all_reduce",
    "_reduce_scatter_base_": "reduce_scatter",
    "reduce_scatter_": "reduce_scatter",
    "reduce_scatter_tensor_coalesced_": "reduce_scatter",
    "_allgather_base_": "all_gather",
    "allgather_": "all_gather",
    "allgather_into_tensor_coalesced_": "all_gather",
    "broadcast_": "broadcast",
}


def _tensors(args) -> list[torch.Tensor]:
    found = []
    for arg in args:
        if isinstance(arg, torch.Tensor):
            found.append(arg)
        elif isinstance(arg, (list, tuple)):
            found += _tensors(arg)
    return found


class CollectiveRecorder(TorchDispatchMode):
    """Counts each collective's calls, and the dtypes and element counts of the tensors it moved
    (the largest tensor of a call: a reduce-scatter's input, an all-gather's output), and the
    storages its tensors live in (where DDP's buckets are: `gradient_as_bucket_view`'s evidence)."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: dict[str, list[tuple[str, int]]] = defaultdict(list)
        self.storages: dict[str, set[int]] = defaultdict(set)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kind = COLLECTIVE_OPS.get(func.overloadpacket.__name__) if func.namespace == "c10d" else None
        if kind is not None:
            tensors = _tensors(args)
            self.storages[kind] |= {t.untyped_storage().data_ptr() for t in tensors}
            largest = max(tensors, key=lambda t: t.numel(), default=None)
            if largest is not None:
                self.calls[kind].append((str(largest.dtype).removeprefix("torch."), largest.numel()))
        return func(*args, **(kwargs or {}))

    def summary(self) -> dict[str, dict]:
        """{collective: {calls, elements (each call's), dtypes}} for the collectives that ran."""
        return {
            kind: {
                "calls": len(seen),
                "elements": [numel for _, numel in seen],
                "dtypes": sorted({dtype for dtype, _ in seen}),
            }
            for kind, seen in sorted(self.calls.items())
        }
