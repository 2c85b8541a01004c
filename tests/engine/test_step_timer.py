"""Step times without a wait per step: CUDA events read at check boundaries, the host clock on CPU.

`FakeCudaEvent` keeps the contract of `torch.cuda.Event(enable_timing=True)` (torch/cuda/streams.py,
torch 2.13): `record()` enqueues it on the current stream, `synchronize()` waits until it and all
work recorded before it on that stream are done, and `elapsed_time(end)` returns milliseconds, or
raises as cudaEventElapsedTime does (cudaErrorNotReady) while either event is still pending. The
fake device runs each step for a set time, so what the timer reports can be checked.
"""

from __future__ import annotations

import dataclasses

import pytest
import torch
from conftest import toy_config

from hpo.config.trial import Knobs
from hpo.engine import AssembledModel
from hpo.hardware._step_timer import CudaStepTimer, StepTimer, step_timer
from hpo.trial import _trainer as trainer
from hpo.workloads.catalog import create_workload


class FakeStream:
    """A device stream: `now_ms` advances as the test says the device ran; events recorded on it
    complete only when the host waits (the device runs behind the host)."""

    def __init__(self):
        self.now_ms, self.calls, self.recorded = 0.0, [], []

    def run(self, ms: float) -> None:
        self.now_ms += ms


class FakeCudaEvent:
    def __init__(self, stream: FakeStream):
        self.stream, self.at_ms, self.done = stream, None, False

    def record(self, stream=None) -> None:
        self.stream.calls.append("record")
        self.at_ms, self.done = self.stream.now_ms, False
        if self in self.stream.recorded:  # recorded again: it now stands after the later work
            self.stream.recorded.remove(self)
        self.stream.recorded.append(self)

    def synchronize(self) -> None:
        self.stream.calls.append("synchronize")
        index = self.stream.recorded.index(self)
        for event in self.stream.recorded[: index + 1]:  # one stream: everything before it is done
            event.done = True

    def elapsed_time(self, end: FakeCudaEvent) -> float:
        if not (self.done and end.done):
            raise RuntimeError("CUDA error: device not ready")
        return end.at_ms - self.at_ms


def test_cuda_steps_are_timed_by_events_read_at_the_boundary_with_one_wait():
    stream = FakeStream()
    made = []
    timer = CudaStepTimer(lambda: made.append(FakeCudaEvent(stream)) or made[-1])
    for ms in (5.0, 7.0, 9.0):
        timer.start()
        stream.run(ms)
        timer.stop()
    assert "synchronize" not in stream.calls  # no step waited
    assert timer.host_s < 0.005  # the host only launched the work
    assert timer.read() == pytest.approx([0.005, 0.007, 0.009])
    assert stream.calls.count("synchronize") == 1  # one wait, on the last event
    timer.start()
    stream.run(2.0)
    timer.stop()
    assert timer.read() == pytest.approx([0.002])
    assert len(made) == 6  # the events of read steps are used again: two new ones, then none
    assert timer.read() == []


def test_reading_an_event_the_device_has_not_reached_fails_as_cuda_does():
    """The fake refuses what CUDA refuses, so a timer that skipped the wait would fail here."""
    stream = FakeStream()
    start, end = FakeCudaEvent(stream), FakeCudaEvent(stream)
    start.record()
    end.record()
    with pytest.raises(RuntimeError, match="device not ready"):
        start.elapsed_time(end)


def test_the_host_clock_times_cpu_steps_exactly():
    timer = step_timer(torch.device("cpu"))
    assert type(timer) is StepTimer
    timer.start()
    sum(range(100000))
    timer.stop()
    host = timer.host_s
    assert host > 0 and timer.read() == [host] and timer.host_s == 0


def test_the_trainer_takes_its_step_times_and_training_time_from_the_timer(monkeypatch):
    """Through a fake CUDA timer whose device runs each step for 10 ms: the median step, the
    training time (the profiled step excluded) and the evidence time are the events' figures, and
    the events are waited on only at the boundaries (after steps 0, 2, 5, 8, 9: a check every 3
    steps, the profiled step, the evaluation after step 5 and the last)."""
    stream = FakeStream()
    real_step = trainer.run_step

    def step_that_runs_10_ms(*args, **kwargs):
        stream.run(10.0)
        return real_step(*args, **kwargs)

    monkeypatch.setattr(trainer, "run_step", step_that_runs_10_ms)
    monkeypatch.setattr(trainer, "step_timer", lambda device: CudaStepTimer(lambda: FakeCudaEvent(stream)))
    config = toy_config(Knobs(precision="fp32", attention="eager", optimizer="forloop"), max_steps=10, eval_every=6)
    config = dataclasses.replace(config, training=dataclasses.replace(config.training, check_every=3))
    assembled = AssembledModel(
        create_workload(config.workload, config.workload_options), config.knobs, config.training, torch.device("cpu")
    )
    result = trainer.train(assembled, config)
    assert result.step_time_ms == pytest.approx(10.0) and result.fastest_step_ms == pytest.approx(10.0)
    assert result.train_s == pytest.approx(0.09) and result.evidence_s == pytest.approx(0.01)
    assert result.train_samples_per_s == pytest.approx(16 / 0.01) == result.steady_samples_per_s
    assert stream.calls.count("synchronize") == 5
