"""The peak bytes autograd keeps saved for backward, the figure gradient checkpointing exists to
lower, on any device. The knobs benchmark reports it on CPU, where a noisy resident set hides it
(a trial's own `peak_mem_mb` is `hpo.hardware.MemoryMeter`'s)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Iterator

import torch

__all__ = ["saved_activations", "tensor_bytes"]


@contextlib.contextmanager
def saved_activations(exclude: Iterable[torch.Tensor] = ()) -> Iterator[_SavedBytes]:
    """Count what autograd saves for backward in this block; the yielded counter's `peak` is its
    peak in bytes. Tensors sharing a storage with `exclude` (pass the parameters: they are alive
    anyway) are not counted."""
    saved = _SavedBytes({t.untyped_storage().data_ptr() for t in exclude})
    with torch.autograd.graph.saved_tensors_hooks(saved.pack, _unpack):
        yield saved


def tensor_bytes(tensors: Iterable[torch.Tensor]) -> int:
    """Bytes held by these tensors' elements (a view counts as its own elements)."""
    return sum(t.numel() * t.element_size() for t in tensors)


class _SavedBytes:
    """Live bytes of the distinct storages autograd holds for backward. A storage saved twice
    (the same activation used by two ops) counts once, until its last saved reference is freed."""

    def __init__(self, skip: set[int]):
        self.skip, self.refs, self.live, self.peak = skip, {}, 0, 0

    def pack(self, tensor: torch.Tensor):
        storage = tensor.untyped_storage()
        key = storage.data_ptr()
        if key in self.skip:
            return tensor
        if key not in self.refs:
            self.refs[key] = [0, storage.nbytes()]
            self.live += storage.nbytes()
            self.peak = max(self.peak, self.live)
        self.refs[key][0] += 1
        return _Held(tensor, key, self)

    def release(self, key: int) -> None:
        entry = self.refs[key]
        entry[0] -= 1
        if entry[0] == 0:
            self.live -= entry[1]
            del self.refs[key]


class _Held:
    """What autograd keeps instead of the tensor; its deletion means the tensor is no longer saved
    (autograd frees it after backward uses it, or when the graph is dropped)."""

    def __init__(self, tensor: torch.Tensor, key: int, tracker: _SavedBytes):
        self.tensor, self.key, self.tracker = tensor, key, tracker

    def __del__(self):
        self.tracker.release(self.key)


def _unpack(held):
    return held.tensor if isinstance(held, _Held) else held
