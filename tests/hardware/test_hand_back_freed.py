"""What `hand_back_freed` hands back depends on the device: the caching allocator's free blocks on
CUDA (no C heap trim, which would not touch them), the C heap's free pages on a CPU."""

from __future__ import annotations

import torch

from hpo.hardware import _memory as memory


def test_cuda_empties_the_caching_allocator_and_a_cpu_trims_the_heap(monkeypatch):
    calls = []
    monkeypatch.setattr(torch.cuda, "empty_cache", lambda: calls.append("empty_cache"))
    monkeypatch.setattr(memory, "release_freed_memory", lambda: calls.append("malloc_trim"))
    memory.hand_back_freed(torch.device("cuda", 0))
    memory.hand_back_freed(torch.device("cpu"))
    assert calls == ["empty_cache", "malloc_trim"]
