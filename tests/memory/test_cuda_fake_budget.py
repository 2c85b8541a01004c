"""The memory budget's decisions on a faked CUDA device: no GPU is used or claimed.

What is faked, and only that: the readings hpo takes from torch.cuda (`mem_get_info`'s device
total, `get_device_name`, `Event` for the step timer (on the host's clock), `reset_peak_memory_stats` / `max_memory_allocated` of the caching allocator,
`set_per_process_memory_fraction`'s cap, `empty_cache`) and the allocator itself, which charges
each forward a stated amount for its batch (`FIXED + PER_SAMPLE x batch`, plus a workspace that
appears above `WORKSPACE_FROM` samples, which the linear model cannot see) and raises
`torch.OutOfMemoryError` when that passes its cap, as CUDA's allocator does. The model, its batches
and its steps run on the CPU underneath, labelled `cuda` so that hpo's meter, limit and
enforcement take their CUDA branches (`hpo.hardware._memory`, `hpo.hardware._memory_model`).
The model's device health and batches stay on the CPU (the one place a real CUDA tensor would be
made). What this shows is that hpo's decisions follow the CUDA readings; not how a real GPU's
allocator sizes a step.
"""

from __future__ import annotations

import dataclasses
import time

import pytest
import torch

from hpo.config.trial import Knobs, TrainingConfig, TrialConfig
from hpo.engine import AssembledModel, DeviceHealth
from hpo.engine import _assembly as assembly
from hpo.hardware import GB, enforced_limit, limit_bytes
from hpo.records import RecordKey
from hpo.trial import Phases
from hpo.trial import _executor as executor
from hpo.trial._memory_limit import budget_memory
from hpo.trial._run import TrialRun
from hpo.verdicts import Kind
from hpo.verify.stored import MemoryVerdicts
from hpo.workloads.catalog import create_workload

CUDA = torch.device("cuda")
MB = 2**20
FIXED, PER_SAMPLE = 2 * GB, 64 * MB  # the fake allocator's charge for a forward at `batch`
WORKSPACE_FROM, WORKSPACE = 32, 8 * GB  # a kernel whose workspace grows past 32 samples
BATCH = 64
OPTIONS = {"d_model": 16, "seq_len": 8, "n_blocks": 2}


class FakeCudaAllocator:
    """torch.cuda's memory readings and an allocator capped at `set_per_process_memory_fraction`."""

    def __init__(self, total_bytes: int):
        self.total, self.cap, self.peak = total_bytes, total_bytes, 0
        self.batches: list[int] = []  # every forward's batch size, in order

    def charge(self, batch: int) -> None:
        self.batches.append(batch)
        size = FIXED + PER_SAMPLE * batch + (WORKSPACE if batch > WORKSPACE_FROM else 0)
        if size > self.cap:
            raise torch.OutOfMemoryError(
                f"CUDA out of memory. Tried to allocate {size / GB:.2f} GiB; capped at {self.cap / GB:.2f} GiB (fake allocator)"
            )
        self.peak = max(self.peak, size)

    def install(self, monkeypatch: pytest.MonkeyPatch) -> None:
        cuda = torch.cuda
        monkeypatch.setattr(cuda, "mem_get_info", lambda device=None: (self.total, self.total))
        monkeypatch.setattr(cuda, "reset_peak_memory_stats", lambda device=None: setattr(self, "peak", 0))
        monkeypatch.setattr(cuda, "max_memory_allocated", lambda device=None: self.peak)
        monkeypatch.setattr(cuda, "empty_cache", lambda: None)
        monkeypatch.setattr(cuda, "Event", _HostClockEvent)
        monkeypatch.setattr(cuda, "get_device_name", lambda device=None: "fake CUDA device (CPU underneath)")
        monkeypatch.setattr(cuda, "set_per_process_memory_fraction", self._set_fraction)
        monkeypatch.setattr(cuda, "current_device", lambda: 0)

    def _set_fraction(self, fraction: float, device=None) -> None:
        # As torch's (torch/cuda/memory.py: `_get_device_index(device)`, not optional): an ordinal,
        # None for the current device, or a device with its index; a bare "cuda" raises.
        if isinstance(device, (str, torch.device)) and torch.device(device).index is None:
            raise ValueError(f"Expected a torch.device with a specified index or an integer, but got:{device}")
        self.cap = int(fraction * self.total)


class _HostClockEvent:
    """A CUDA event for hpo's step timer, on the host's clock (the steps run on the CPU)."""

    def __init__(self, enable_timing: bool = False, **_):
        self.at = 0.0

    def record(self, stream=None) -> None:
        self.at = time.perf_counter()

    def synchronize(self) -> None:
        pass

    def elapsed_time(self, end: _HostClockEvent) -> float:
        return (end.at - self.at) * 1000


@pytest.fixture
def gpu(monkeypatch):
    """An 80 GB "GPU"; the model's tensors stay on the CPU (see the module's docstring)."""
    allocator = FakeCudaAllocator(80 * GB)
    allocator.install(monkeypatch)
    monkeypatch.setattr(AssembledModel, "move", lambda self, batch: batch)
    monkeypatch.setattr(assembly, "DeviceHealth", lambda device: DeviceHealth(torch.device("cpu")))
    return allocator


def _config(limit_gb: float | None, batch: int = BATCH) -> TrialConfig:
    return TrialConfig(
        workload="toy_workloads:Toy",
        workload_options=OPTIONS,
        training=TrainingConfig(batch_size=batch, max_steps=2, eval_every=2),
        knobs=Knobs(attention="eager", grad_checkpointing=False),
        skip_slow=False,
        memory_limit_gb=limit_gb,
    )


def _run_on_fake_cuda(config: TrialConfig, allocator: FakeCudaAllocator) -> TrialRun:
    """A trial as the probe hands it on: its workload loaded and its model built (on the CPU),
    the run and the model labelled `cuda`, every forward charged to the fake allocator."""
    run = TrialRun(config, MemoryVerdicts(), None, Phases(), None)
    run.device = CUDA
    workload = create_workload(config.workload, config.workload_options)
    workload.bind_training(dataclasses.asdict(config.training))
    loss = workload.training_loss

    def charged_loss(model, batch):
        allocator.charge(next(iter(batch.values())).shape[0])
        return loss(model, batch)

    workload.training_loss = charged_loss
    run.workload = workload
    run.model = AssembledModel(workload, config.knobs, config.training, torch.device("cpu"))
    run.model.device = CUDA
    run.model.restart()  # its meter and health made again for `cuda`
    return run


def test_the_default_limit_is_the_device_total_less_the_margin(gpu):
    assert limit_bytes(CUDA, None) == 76 * GB  # 80 GB less 5%
    gpu.total = 16 * GB
    assert limit_bytes(CUDA, None) == 15 * GB  # less 1 GB: 5% of 16 GB is under it
    assert limit_bytes(CUDA, 24.0) == 24 * GB  # a limit the study sets wins
    assert limit_bytes(torch.device("cpu"), None) is None


def test_the_allocator_is_capped_at_the_limit_while_training(gpu):
    with enforced_limit(CUDA, 24 * GB):
        assert gpu.cap == 24 * GB
    assert gpu.cap == gpu.total


def test_a_batch_predicted_over_the_limit_is_rejected_before_a_training_step(gpu):
    # Grown from 1 to 16 samples, fitted at 8 and 16: 2 GB + 64 MB a sample predicts 6 GB at 64; 4 GB fits 32.
    run = _run_on_fake_cuda(_config(limit_gb=4.0), gpu)
    outcome = budget_memory(run)
    assert outcome is not None and outcome.verdict.kind == Kind.OOM
    assert str(outcome.verdict) == "oom: predicted 6 GB > limit 4 GB at batch 64 (fits up to 32)"
    assert dict(outcome.verdict.implicates)["batch_size"] == BATCH
    assert max(gpu.batches) < BATCH  # only the fit's small steps ran: no step at the trial's batch
    assert outcome.attrs[RecordKey.PREDICTED_PEAK_MB] == pytest.approx(6 * 1024)
    assert outcome.attrs[RecordKey.MEMORY_LIMIT_MB] == 4 * 1024


def _over(limit_gb: float, batches: list[int]) -> list[int]:
    """The batches in `batches` whose step the fake allocator charges over `limit_gb`."""
    return [b for b in batches if FIXED + PER_SAMPLE * b > limit_gb * GB]


def test_the_fit_grows_from_one_sample_only_while_it_predicts_the_next_size_fits(gpu):
    # 2.5 GB fits 8 samples (2 GB + 8 x 64 MB). The fit's first steps are at 1 and 2 samples; 4 is
    # predicted at 2.25 GB, within 95% of the limit, and runs; 8 is predicted at 2.5 GB, past 95%,
    # and does not. A fit at an eighth and a quarter of the batch stepped at 8 and 16, over it.
    run = _run_on_fake_cuda(_config(limit_gb=2.5), gpu)
    outcome = budget_memory(run)
    assert str(outcome.verdict) == "oom: predicted 6 GB > limit 2.5 GB at batch 64 (fits up to 8)"
    # The unmeasured first step, each size measured, then the two largest again (the fit's points).
    assert gpu.batches == [1, 1, 2, 4, 2, 4]
    assert _over(2.5, gpu.batches) == []
    assert outcome.attrs[RecordKey.MEMORY_MODEL]["batches"] == [2, 4]


def test_the_fit_stops_at_a_quarter_of_the_batch_when_everything_fits(gpu):
    run = _run_on_fake_cuda(_config(limit_gb=40.0), gpu)
    assert budget_memory(run) is None
    assert gpu.batches == [1, 1, 2, 4, 8, 16, 8, 16]  # 32 is past 64 / 4
    assert run.attrs[RecordKey.MEMORY_MODEL]["batches"] == [8, 16]
    assert run.attrs[RecordKey.PREDICTED_PEAK_MB] == pytest.approx(2 * 1024 + 64 * 64)


def test_a_cached_fit_grows_when_a_later_trial_needs_a_larger_batch(gpu):
    store = MemoryVerdicts()
    small = _run_on_fake_cuda(_config(limit_gb=40.0, batch=8), gpu)
    small.verdicts = store
    assert budget_memory(small) is None
    assert small.attrs[RecordKey.MEMORY_MODEL]["batches"] == [1, 2]  # 4 is past 8 / 4
    gpu.batches.clear()
    large = _run_on_fake_cuda(_config(limit_gb=40.0, batch=128), gpu)
    large.verdicts = store
    assert budget_memory(large) is None
    assert gpu.batches == [1, 4, 8, 16, 32, 16, 32]  # grown from the cached 1 and 2, after one unmeasured step
    assert large.attrs[RecordKey.MEMORY_MODEL]["batches"] == [16, 32]


def test_an_out_of_memory_while_training_is_recorded_as_oom_naming_knobs_and_batch(gpu, monkeypatch):
    # Predicted 6 GB at 64, under the 12 GB limit; the workspace past 32 samples makes it 14 GB,
    # over the allocator's cap of 12 GB, which raises torch.OutOfMemoryError in training's first step.
    run = _run_on_fake_cuda(_config(limit_gb=12.0), gpu)
    monkeypatch.setattr(executor, "_load_workload", lambda run: None)  # loaded above
    monkeypatch.setattr(executor, "_verify", lambda run: None)  # the probe passed; its model handed on
    outcome = executor._outcome(run)
    assert outcome.verdict.kind == Kind.OOM, outcome.verdict
    assert str(outcome.verdict).startswith("oom: OutOfMemoryError: CUDA out of memory. Tried to allocate 14.00 GiB")
    assert outcome.attrs[RecordKey.PREDICTED_PEAK_MB] == 6 * 1024
    assert dict(outcome.verdict.implicates) == {**run.config.knobs.as_dict(), "batch_size": BATCH}
    assert gpu.batches[-1] == BATCH and gpu.cap == gpu.total  # it failed at the trial's batch; the cap restored
