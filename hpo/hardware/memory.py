"""The one memory meter: a trial's peak memory (CUDA allocator or CPU resident set), and the peak
bytes autograd keeps saved for backward, the figure gradient checkpointing exists to lower."""

from __future__ import annotations

import contextlib
import gc
import os
from collections.abc import Iterable, Iterator

import torch

__all__ = ["MemoryMeter", "resident_bytes", "tensor_bytes"]


class MemoryMeter:
    """Peak memory of one trial. CUDA: the allocator's peak since reset. CPU: the largest resident
    set sampled at the step's high-water marks (after forward, when activations are alive), so
    it is this trial's own figure even when trials share a process (ru_maxrss never resets).

    `saved_activations()` measures a second figure, on any device: the peak live bytes of the
    distinct storages autograd saves for backward inside the block. A trial's `peak_mem_mb` is
    the first figure only; the benchmarks use the second, which a noisy resident set hides on CPU."""

    def __init__(self, device: torch.device):
        self.device, self.peak_bytes, self.saved_peak_bytes = device, 0, 0
        if device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(device)

    def sample(self) -> None:
        if self.device.type != "cuda":
            self.peak_bytes = max(self.peak_bytes, resident_bytes())

    @property
    def peak_mb(self) -> float:
        if self.device.type == "cuda":
            return torch.cuda.max_memory_allocated(self.device) / 2**20
        return self.peak_bytes / 2**20

    @contextlib.contextmanager
    def saved_activations(self, exclude: Iterable[torch.Tensor] = ()) -> Iterator[MemoryMeter]:
        """Count what autograd saves for backward in this block; `saved_peak_mb` is its peak.
        Tensors sharing a storage with `exclude` (pass the parameters: they are alive anyway)
        are not counted."""
        saved = _SavedBytes({t.untyped_storage().data_ptr() for t in exclude})
        try:
            with torch.autograd.graph.saved_tensors_hooks(saved.pack, _unpack):
                yield self
        finally:
            self.saved_peak_bytes = max(self.saved_peak_bytes, saved.peak)

    @property
    def saved_peak_mb(self) -> float:
        return self.saved_peak_bytes / 2**20


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


def resident_bytes() -> int:
    """This process's resident set in bytes (on Linux; elsewhere its peak so far)."""
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError):  # not Linux: fall back to the process peak
        import resource

        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def free_memory(device: torch.device) -> None:
    """Collect what a finished model left behind, and on CUDA hand the cached blocks back, before
    the next model (or the next trial) is built."""
    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()
