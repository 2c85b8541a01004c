"""On a CPU, `study.memory_limit_gb` is a hard cap on the trial's process: an allocation past it
fails inside the process (torch's CPU allocator raises), which then records the trial `oom`,
instead of growing until the kernel's OOM killer ends it. Allocations here are never touched: a
test that went wrong would reserve address space, not RAM."""

from __future__ import annotations

import dataclasses
import os
import resource
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from conftest import toy_config

from hpo.hardware import capped_process, is_out_of_memory, resident_bytes
from hpo.trial import execute
from hpo.verdicts import Kind
from hpo.verify.stored import MemoryVerdicts

CPU = torch.device("cpu")
ROOT = Path(__file__).resolve().parents[2]
GB = 2**30
# Past every cap set here (at most 1 GB above this process's resident set, plus the margin), and
# granted where nothing caps it: never touched, it reserves address space, not RAM.
PAST_THE_CAP = 2 * GB


def _limit_above_this_process(extra_bytes: int) -> int:
    return resident_bytes() + extra_bytes


def test_an_allocation_past_the_cap_fails_inside_the_process_and_the_cap_is_lifted_after():
    before = resource.getrlimit(resource.RLIMIT_DATA)
    with capped_process(CPU, _limit_above_this_process(256 * 2**20)) as cap:
        assert cap is not None
        kept = torch.ones(64 * 2**20, dtype=torch.uint8)  # within the limit: allocated and touched
        with pytest.raises(RuntimeError, match="DefaultCPUAllocator: can't allocate memory") as failed:
            torch.empty(PAST_THE_CAP, dtype=torch.uint8)
        assert is_out_of_memory(failed.value)
        with pytest.raises(MemoryError):
            bytearray(PAST_THE_CAP)
    assert resource.getrlimit(resource.RLIMIT_DATA) == before
    assert int(kept.sum()) == 64 * 2**20
    assert torch.empty(PAST_THE_CAP, dtype=torch.uint8).numel() == PAST_THE_CAP  # granted once the cap is lifted


@pytest.mark.parametrize("device, limit", [(CPU, None), (torch.device("cuda"), 4 * GB)])
def test_no_cap_without_a_limit_or_on_cuda(device, limit):
    before = resource.getrlimit(resource.RLIMIT_DATA)
    with capped_process(device, limit) as cap:
        assert cap is None and resource.getrlimit(resource.RLIMIT_DATA) == before


def test_only_an_allocation_failure_reads_as_out_of_memory():
    assert is_out_of_memory(MemoryError())
    assert is_out_of_memory(torch.OutOfMemoryError("CUDA out of memory"))
    assert not is_out_of_memory(RuntimeError("mat1 and mat2 shapes cannot be multiplied"))


def _limited(config, limit_bytes: int):
    return dataclasses.replace(config, memory_limit_gb=limit_bytes / GB)


def test_a_step_that_allocates_past_the_limit_ends_the_trial_oom_in_its_process(monkeypatch):
    from toy_workloads import Toy

    real_loss, seen = Toy.training_loss, []

    def allocates_past_the_limit(self, model, batch):
        seen.append(resource.getrlimit(resource.RLIMIT_DATA)[0])
        torch.empty(PAST_THE_CAP, dtype=torch.uint8)
        return real_loss(self, model, batch)

    monkeypatch.setattr(Toy, "training_loss", allocates_past_the_limit)
    before = resource.getrlimit(resource.RLIMIT_DATA)
    outcome = execute(_limited(toy_config(), _limit_above_this_process(GB)), MemoryVerdicts())
    assert outcome.verdict.kind is Kind.OOM, str(outcome.verdict)
    assert "RuntimeError: DefaultCPUAllocator: can't allocate memory" in str(outcome.verdict)
    assert dict(outcome.verdict.implicates)["batch_size"] == 16
    assert seen and seen[0] != resource.RLIM_INFINITY  # the cap held the step
    assert resource.getrlimit(resource.RLIMIT_DATA) == before


def test_a_trial_within_its_limit_trains_under_the_cap_and_one_without_a_limit_is_not_capped(monkeypatch):
    from toy_workloads import Toy

    real_loss, seen = Toy.training_loss, []

    def records_the_cap(self, model, batch):
        seen.append(resource.getrlimit(resource.RLIMIT_DATA)[0])
        return real_loss(self, model, batch)

    monkeypatch.setattr(Toy, "training_loss", records_the_cap)
    assert execute(_limited(toy_config(), _limit_above_this_process(GB)), MemoryVerdicts()).ok
    assert seen and all(cap != resource.RLIM_INFINITY for cap in seen)
    seen.clear()
    assert execute(toy_config(), MemoryVerdicts()).ok
    assert seen and all(cap == resource.getrlimit(resource.RLIMIT_DATA)[0] for cap in seen)


POOL_STARTED_UNDER_THE_CAP = """
import sys, torch
import hpo.hardware._memory_cap as memory_cap
from hpo.hardware._memory import resident_bytes
if sys.argv[1] == "stacks not counted":
    memory_cap.thread_stacks_bytes = lambda: 0
torch.set_num_threads(32)
with memory_cap.capped_process(torch.device("cpu"), resident_bytes()):
    x = torch.randn(512, 512)
    print("trained", bool(torch.isfinite(x @ x).all()))
"""


def _eight_mb_thread_stacks() -> None:
    """glibc sizes a thread's stack by RLIMIT_STACK as the process starts (2 MB where unlimited):
    8 MB, the usual default, whatever the test runner's limit."""
    resource.setrlimit(resource.RLIMIT_STACK, (8 * 2**20, resource.getrlimit(resource.RLIMIT_STACK)[1]))


@pytest.mark.parametrize("stacks", ["stacks counted", "stacks not counted"])
def test_torch_starts_its_thread_pool_under_the_cap(stacks):
    """A forkserver child starts torch's OpenMP pool at its first parallel op, under the cap; libgomp
    ends the process ("Thread creation failed") when a thread's stack does not fit. 32 threads of
    8 MB stacks are more than the margin alone."""
    run = subprocess.run(
        [sys.executable, "-c", POOL_STARTED_UNDER_THE_CAP, stacks],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        preexec_fn=_eight_mb_thread_stacks,
    )
    if stacks == "stacks counted":
        assert run.returncode == 0 and "trained True" in run.stdout, run.stderr[-2000:]
    else:  # the fault this guards against, shown once
        assert run.returncode != 0 and "Thread creation failed" in run.stderr, (run.returncode, run.stderr[-2000:])


def test_a_lower_limit_the_user_set_is_kept_and_restored():
    soft, hard = resource.getrlimit(resource.RLIMIT_DATA)
    users = _status_data_bytes() + 512 * 2**20
    resource.setrlimit(resource.RLIMIT_DATA, (users, hard))
    try:
        with capped_process(CPU, _limit_above_this_process(64 * GB)) as cap:
            assert cap == users and resource.getrlimit(resource.RLIMIT_DATA)[0] == users
        assert resource.getrlimit(resource.RLIMIT_DATA) == (users, hard)
    finally:
        resource.setrlimit(resource.RLIMIT_DATA, (soft, hard))


def _status_data_bytes() -> int:
    with open("/proc/self/status") as status:
        return next(int(line.split()[1]) * 1024 for line in status if line.startswith("VmData:"))
