"""A timed step stopped past its bound (`hpo.verify.timing._step_deadline`, `time_model(stop_past_ms=)`):
faults make a step slow in its forward or in its backward by sleeping, a slowdown no machine
load can shorten; the stop must come in that very phase, leave no gradient behind, and never
touch a step that finishes under the bound."""

from __future__ import annotations

import time

import pytest
import torch
from conftest import toy_config

from hpo.engine import AssembledModel
from hpo.verify.timing import TimingPolicy, time_model
from hpo.verify.timing._step_deadline import Outlasted, StepDeadline, deadline_for
from hpo.workloads.catalog import create_workload

CPU = torch.device("cpu")
SLEEP_S = 0.4
BOUND_MS = 100.0
ONE_TIMED = TimingPolicy(warmup_steps=0, min_repeats=1, max_repeats=1, window=1)


class _SleepsInBackward(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, seconds):
        ctx.seconds = seconds
        return x.clone()

    @staticmethod
    def backward(ctx, grad):
        time.sleep(ctx.seconds)
        return grad, None


def _toy():
    config = toy_config()
    workload = create_workload(config.workload, config.workload_options)
    assembled = AssembledModel(workload, config.knobs, config.training, CPU)
    return assembled, next(workload.train_batches(config.training.batch_size, config.seed))


def _sleep_in(module: torch.nn.Module, phase: str, seconds: float = SLEEP_S) -> None:
    if phase == "forward":
        module.register_forward_hook(lambda m, args, out: time.sleep(seconds))
    else:
        module.register_forward_hook(lambda m, args, out: _SleepsInBackward.apply(out, seconds))


def _bound_and_sleep(assembled, batch) -> tuple[float, float]:
    """A bound the toy's whole step stays under and a sleep far past it, scaled to this moment's
    load: at a load of 12 on 2 cores the toy's forward alone outlasted a fixed 100 ms bound, and the
    step was stopped before the fault's sleep began."""
    whole = time_model(assembled, batch, TimingPolicy(warmup_steps=0, min_repeats=3, max_repeats=3))  # the cold one too
    bound_ms = max(BOUND_MS, 4 * max(whole.times_ms))
    return bound_ms, max(SLEEP_S, 3 * bound_ms / 1000)


@pytest.mark.parametrize("phase", ["forward", "backward"])
def test_a_step_slow_in_either_phase_is_stopped_in_that_phase(phase):
    """Stopped at the first check after the sleep, told by what ran rather than by the clock (a
    bound of the sleep + 300 ms failed beside other jobs): a forward stopped after the first
    block never reaches the last module; a backward stopped after it never updates a weight."""
    assembled, batch = _toy()
    bound_ms, sleep_s = _bound_and_sleep(assembled, batch)
    assembled, batch = _toy()  # untouched by the steps that measured the bound
    _sleep_in(assembled.model.blocks[0], phase, sleep_s)  # the first block: later modules and gradients check
    last = list(assembled.model.modules())[-1]
    reached: list[bool] = []
    last.register_forward_hook(lambda m, args, out: reached.append(True))
    before = [p.detach().clone() for p in assembled.model.parameters()]
    timed = time_model(assembled, batch, ONE_TIMED, stop_past_ms=bound_ms)
    assert timed.times_ms == () and timed.outlasted_ms is not None, timed
    assert timed.outlasted_ms >= sleep_s * 1000, (timed, bound_ms)  # stopped after the sleep, not before
    assert reached == ([] if phase == "forward" else [True]), reached
    assert all(torch.equal(p, b) for p, b in zip(assembled.model.parameters(), before))  # no update ran
    assert all(p.grad is None for p in assembled.model.parameters())  # a stopped backward leaves none


def test_a_step_under_its_bound_is_timed_whole_and_its_deadline_leaves_the_model():
    assembled, batch = _toy()
    hooks_before = sum(len(m._forward_pre_hooks) for m in assembled.model.modules())
    timed = time_model(assembled, batch, TimingPolicy(min_repeats=3, max_repeats=3), stop_past_ms=60_000.0)
    assert timed.outlasted_ms is None and len(timed.times_ms) == 3, timed
    assert sum(len(m._forward_pre_hooks) for m in assembled.model.modules()) == hooks_before
    assert all(not p._backward_hooks for p in assembled.model.parameters())


def test_an_untimed_step_stopped_past_the_bound_does_not_end_the_timing():
    """An untimed step warms the model up: stopped, it is simply over, and the timed step follows."""
    assembled, batch = _toy()
    _sleep_in(assembled.model.blocks[0], "forward")
    timed = time_model(assembled, batch, TimingPolicy(warmup_steps=1, min_repeats=1, max_repeats=1, window=1), BOUND_MS)
    assert timed.outlasted_ms is not None and timed.warmup_steps == 1


def test_the_deadline_only_stops_a_step_run_armed_and_a_compiled_model_gets_none():
    model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Linear(4, 1))
    deadline = StepDeadline(model, bound_ms=0.0)
    model(torch.randn(2, 4)).sum().backward()  # not armed: no stop
    with pytest.raises(Outlasted), deadline.armed(time.perf_counter() - 1.0):
        model(torch.randn(2, 4))
    deadline.remove()
    with deadline_for(model, 0.0, compiled=True) as none, deadline_for(model, None, compiled=False) as unbounded:
        assert none is None and unbounded is None
