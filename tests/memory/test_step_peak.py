"""The peak model's steps on a CPU measure the whole step's high-water mark, not only the resident
set after forward: under gradient checkpointing a step peaks inside backward, where the recomputed
blocks' activations live (a d512 GPT at bf16 under a 3 GB limit chose a batch from after-forward
reads, then went over the limit in training)."""

from __future__ import annotations

import ctypes
import mmap
import sys
import time
from types import SimpleNamespace

import pytest
import torch

from hpo.hardware import MemoryMeter, ResidentPeak, hand_back_freed, reset_resident_peak, resident_bytes
from hpo.verify.peaks import _peak_fit as peak_fit

MB = 2**20
TRANSIENT = 256 * MB


def _transient(size: int = TRANSIENT) -> None:
    """Memory held for a moment and freed, as a recomputed block's activations are in backward."""
    held = torch.ones(size // 4, dtype=torch.float32)  # touched: resident, not only reserved
    time.sleep(0.05)
    del held


def _trimmed_resident() -> int:
    """The resident set once the C heap handed its free pages back (hpo keeps them otherwise, and a
    process that ran other tests would serve the transient from them without growing)."""
    hand_back_freed(torch.device("cpu"))
    return resident_bytes()


def test_the_sampler_sees_memory_freed_before_the_block_ends():
    before = _trimmed_resident()
    with ResidentPeak() as peak:
        _transient()
    assert peak.peak_bytes - before >= 0.9 * TRANSIENT
    assert _trimmed_resident() - before < 0.5 * TRANSIENT  # gone again: a read after the block misses it


def _held_without_a_sampler_running(size: int = TRANSIENT) -> None:
    """Pages mapped, touched and unmapped while this thread keeps the GIL (ctypes.PyDLL calls keep
    it, and no other Python thread is switched in for a minute): a sampling thread starved of the
    CPU by the machine's load misses memory held that way."""
    libc = ctypes.PyDLL(None)
    libc.mmap.restype, libc.mmap.argtypes = (
        ctypes.c_void_p,
        [ctypes.c_void_p, ctypes.c_size_t, *[ctypes.c_int] * 3, ctypes.c_long],
    )
    previous = sys.getswitchinterval()
    sys.setswitchinterval(60.0)
    try:
        address = libc.mmap(None, size, mmap.PROT_READ | mmap.PROT_WRITE, mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS, -1, 0)
        libc.memset(ctypes.c_void_p(address), 1, ctypes.c_size_t(size))
        libc.munmap(ctypes.c_void_p(address), ctypes.c_size_t(size))
    finally:
        sys.setswitchinterval(previous)


@pytest.mark.skipif(not reset_resident_peak(), reason="the kernel's peak resident set (VmHWM) cannot be reset here")
def test_the_step_peak_is_the_kernels_count_not_a_samplers():
    before = _trimmed_resident()
    with ResidentPeak() as peak:
        _held_without_a_sampler_running()
    assert peak.peak_bytes - before >= 0.9 * TRANSIENT  # the sampler alone read about `before`


class _BackwardPeaksModel:
    """What `_step_peak` drives: forward samples the meter (as AssembledModel does), then backward
    holds a transient, the way checkpointing's recomputation does."""

    device = torch.device("cpu")

    def __init__(self):
        self.model = torch.nn.Linear(2, 2)
        self.optimizer = torch.optim.SGD(self.model.parameters(), lr=0.1)
        self.memory: MemoryMeter | None = None

    def move(self, batch):
        return batch

    def forward_backward(self, batch) -> None:
        self.memory.sample()  # the after-forward read
        _transient()  # backward's peak

    def optimizer_step(self) -> None:
        self.optimizer.step()


def test_a_fit_step_counts_a_peak_inside_backward():
    model = _BackwardPeaksModel()
    workload = SimpleNamespace(train_batches=lambda batch_size, seed: iter([{"x": torch.zeros(batch_size, 2)}]))
    config = SimpleNamespace(seed=0)
    before = _trimmed_resident()  # `_step_peak` trims too, before its step
    peak = peak_fit._step_peak(model, workload, config, 4)
    assert peak - before >= 0.9 * TRANSIENT  # an after-forward read alone gave about `before`
