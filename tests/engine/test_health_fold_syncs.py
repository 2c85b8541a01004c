"""Folding the health buffer (every CAPACITY steps, between boundaries) reads nothing on the host:
counted as torch's own host reads (`aten::_local_scalar_dense`, behind `.item()`, `bool()` and a
0-dim tensor used as an index), which a CUDA step would wait for."""

from __future__ import annotations

import math

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from hpo.engine import DeviceHealth


class _HostReads(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.reads = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func is torch.ops.aten._local_scalar_dense.default:
            self.reads += 1
        return func(*args, **(kwargs or {}))


def test_a_fold_between_boundaries_reads_nothing_on_the_host():
    health = DeviceHealth(torch.device("cpu"))
    with _HostReads() as spy:
        for step in range(2 * DeviceHealth.CAPACITY + 3):  # two folds, no read
            health.record(step, torch.tensor(math.nan if step == 70 else 1.0))
    assert spy.reads == 0
    assert health.read().first_bad_step == 70
