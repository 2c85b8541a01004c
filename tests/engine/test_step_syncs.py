"""At most one host-device sync per training step, with non-finite detection as safe as before.

A sync is counted the way `torch.cuda.set_sync_debug_mode("warn")` flags them on CUDA: every
`aten::_local_scalar_dense` (what `.item()`, `bool(t)`, `float(t)` and `GradScaler.get_scale()`
dispatch to), every tensor read to host (`.tolist()`, `.cpu()`, `.numpy()`) and
`torch.cuda.synchronize()`. On this CPU the calls are counted; on CUDA each would wait for the GPU.
"""

from __future__ import annotations

import contextlib
import dataclasses

import pytest
import torch
from conftest import toy_config
from torch.utils._python_dispatch import TorchDispatchMode

from hpo.config.trial import Knobs
from hpo.engine.assembly import AssembledModel
from hpo.engine.step import NonFiniteLoss, run_step
from hpo.errors import TrialRejected
from hpo.workloads.registry import create_workload

CPU = torch.device("cpu")


class SyncCounter(TorchDispatchMode):
    """Counts the ops that read a device value on the host. `host_tensors` live on the CPU on CUDA
    too, so reading them is no sync: the `step` counters of for-loop and foreach optimizers
    (torch/optim/adam.py, "[special device hosting for step]": kept on CPU unless capturable or fused)."""

    def __init__(self, host_tensors=()):
        super().__init__()
        self.count, self.host = 0, {id(t) for t in host_tensors}

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func is torch.ops.aten._local_scalar_dense.default and id(args[0]) not in self.host:
            self.count += 1
        return func(*args, **(kwargs or {}))


def _host_step_counters(assembled: AssembledModel) -> list[torch.Tensor]:
    optimizer = assembled.optimizer
    if optimizer.defaults.get("fused") or optimizer.defaults.get("capturable"):
        return []
    return [state["step"] for state in optimizer.state.values() if "step" in state]


@contextlib.contextmanager
def counting_syncs(monkeypatch, assembled: AssembledModel | None = None):
    counter = SyncCounter(_host_step_counters(assembled) if assembled is not None else ())

    def counted(name):
        original = getattr(torch.Tensor, name)

        def wrapper(self, *args, **kwargs):
            counter.count += 1
            return original(self, *args, **kwargs)

        monkeypatch.setattr(torch.Tensor, name, wrapper)

    for name in ("tolist", "cpu", "numpy"):
        counted(name)
    # GradScaler.get_scale() is counted through the `.item()` it makes.
    monkeypatch.setattr(torch.cuda, "synchronize", lambda *a, **k: setattr(counter, "count", counter.count + 1))
    with counter:
        yield counter


def _assembled(precision: str, optimizer: str = "forloop", grad_clip: float = 1.0, **options) -> AssembledModel:
    config = toy_config(Knobs(precision=precision, attention="eager", optimizer=optimizer), **options)
    training = dataclasses.replace(config.training, grad_clip=grad_clip)
    torch.manual_seed(0)
    return AssembledModel(create_workload(config.workload, config.workload_options), config.knobs, training, CPU)


def test_the_spy_sees_the_syncs_it_counts(monkeypatch):
    """The control: each kind of host read the old step made is counted once."""
    assembled = _assembled("fp16")
    loss = torch.tensor(1.0)
    assembled.scaler.scale(loss)  # the scale tensor exists from the first scaled loss on
    with counting_syncs(monkeypatch, assembled) as spy:
        bool(torch.isfinite(loss))
        assembled.scaler.get_scale()
        loss.tolist()
    assert spy.count == 3


@pytest.mark.parametrize(
    "precision,optimizer",
    [("fp32", "forloop"), ("fp32", "fused"), ("bf16", "foreach"), ("fp16", "forloop"), ("fp16", "fused")],
)
@pytest.mark.parametrize("grad_clip", [0.0, 1.0])
def test_a_training_step_syncs_at_most_once(monkeypatch, precision, optimizer, grad_clip):
    assembled = _assembled(precision, optimizer, grad_clip)
    batches = assembled.workload.train_batches(16, 0)
    run_step(assembled, next(batches), 0)  # warm-up outside the count (lazy optimizer state)
    steps = 3
    with counting_syncs(monkeypatch, assembled) as spy:
        for step in range(1, 1 + steps):
            run_step(assembled, next(batches), step)
    assert spy.count <= steps, f"{spy.count} syncs in {steps} steps"


@pytest.mark.parametrize("precision", ["fp32", "fp16"])
def test_a_nan_loss_raises_before_any_update(monkeypatch, precision):
    assembled = _assembled(precision, nan_at_step=1)
    batches = assembled.workload.train_batches(16, 0)
    run_step(assembled, next(batches), 0)
    before = {k: v.clone() for k, v in assembled.model.state_dict().items()}
    with counting_syncs(monkeypatch, assembled) as spy, pytest.raises(NonFiniteLoss, match="step 1: loss is nan"):
        run_step(assembled, next(batches), 1)
    assert spy.count == 1
    after = assembled.model.state_dict()
    assert all(torch.equal(before[k], after[k]) for k in before)
    assert all(p.grad is None for p in assembled.model.parameters())


def test_fp16_inf_gradients_skip_the_update_and_back_off_the_scale_without_another_sync(monkeypatch):
    assembled = _assembled("fp16")
    batches = assembled.workload.train_batches(16, 0)
    run_step(assembled, next(batches), 0)
    assembled.scaler.update(new_scale=3e38)  # the scaled loss overflows: inf gradients, finite loss
    before = {k: v.clone() for k, v in assembled.model.state_dict().items()}
    with counting_syncs(monkeypatch, assembled) as spy:
        run_step(assembled, next(batches), 1)
    assert spy.count == 1
    after = assembled.model.state_dict()
    assert all(torch.equal(before[k], after[k]) for k in before)  # skipped, as GradScaler.step skips
    assert assembled.scaler.get_scale() == pytest.approx(3e38 * assembled.scaler.get_backoff_factor(), rel=1e-6)


def test_a_collapsed_fp16_scale_is_still_rejected(monkeypatch):
    assembled = _assembled("fp16")
    batches = assembled.workload.train_batches(16, 0)
    run_step(assembled, next(batches), 0)
    assembled.scaler.update(new_scale=2.0**-14)
    # Force inf gradients so the scale backs off below the floor on this step.
    monkeypatch.setattr(assembled.precision, "found_inf", lambda optimizer: torch.tensor(1.0))
    with pytest.raises(TrialRejected, match="scale collapsed to 3.05e-05"):
        run_step(assembled, next(batches), 1)


def test_the_trainer_waits_for_the_device_once_per_step_besides_the_steps_own_read(monkeypatch):
    """hpo's loop times each step to its end, which on CUDA takes one torch.cuda.synchronize; the
    synchronize that also opened every step is gone when nothing ran since the last one ended."""
    from hpo.trial import trainer

    waits = []
    monkeypatch.setattr(trainer, "synchronize", lambda device: waits.append(device))
    config = toy_config(Knobs(precision="fp32", attention="eager", optimizer="forloop"), max_steps=6, eval_every=3)
    assembled = _assembled("fp32")
    trainer.train(assembled, config)
    # 6 step ends, the first step's start, and the start of the step after the evaluation at step 3.
    assert len(waits) == 6 + 1 + 1
