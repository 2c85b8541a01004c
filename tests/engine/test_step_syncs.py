"""No host-device sync on an ordinary training step: the loss is read, and non-finite values caught,
only at check boundaries, and a trial that diverged between two still ends `diverged`.

A sync is counted the way `torch.cuda.set_sync_debug_mode("warn")` flags them on CUDA: every
`aten::_local_scalar_dense` (what `.item()`, `bool(t)`, `float(t)`, `int(t)` and
`GradScaler.get_scale()` dispatch to), every tensor read to host (`.tolist()`, `.cpu()`,
`.numpy()`), `torch.cuda.synchronize()` and hpo's own `synchronize` wrapper. On this CPU the calls
are counted; on CUDA each would wait for the GPU. The spy covers the whole of `train()`, and
charges each sync to the step whose batch was fetched last.
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import math
import sys

import pytest
import torch
from conftest import toy_config
from torch.utils._python_dispatch import TorchDispatchMode

from hpo.config.trial import Knobs
from hpo.engine import AssembledModel, NonFiniteLoss, run_step
from hpo.errors import TrialRejected
from hpo.hardware import _runtime as runtime
from hpo.trial import _trainer as trainer
from hpo.workloads.catalog import create_workload

CPU = torch.device("cpu")


class SyncSpy(TorchDispatchMode):
    """Counts host reads per step index (`step` is set by the batch iterator). The `step` counters
    of for-loop and foreach optimizers live on the CPU on CUDA too (torch/optim/adam.py, "[special
    device hosting for step]": kept on CPU unless capturable or fused), so reading them is no sync.
    Reads GradScaler.step makes to decide its own skip (`_maybe_opt_step`) are counted apart."""

    def __init__(self, optimizer=lambda: None):
        super().__init__()
        self.optimizer, self.step, self.in_scaler = optimizer, -1, False
        self.syncs: collections.Counter[int] = collections.Counter()
        self.scaler_syncs: collections.Counter[int] = collections.Counter()

    def hit(self) -> None:
        (self.scaler_syncs if self.in_scaler else self.syncs)[self.step] += 1

    def _host_counter(self, tensor) -> bool:
        optimizer = self.optimizer()
        return optimizer is not None and any(state.get("step") is tensor for state in optimizer.state.values())

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func is torch.ops.aten._local_scalar_dense.default and not self._host_counter(args[0]):
            self.hit()
        return func(*args, **(kwargs or {}))

    def batches(self, batches):
        """The workload's batches, marking the start of each step."""
        for step, batch in enumerate(batches):
            self.step = step
            yield batch


@contextlib.contextmanager
def spying(monkeypatch, assembled: AssembledModel | None = None, optimizer=None):
    spy = SyncSpy(optimizer or (lambda: assembled.optimizer if assembled is not None else None))

    def counted(owner, name):
        original = getattr(owner, name)

        def wrapper(*args, **kwargs):
            spy.hit()
            return original(*args, **kwargs)

        monkeypatch.setattr(owner, name, wrapper)

    for name in ("tolist", "cpu", "numpy"):
        counted(torch.Tensor, name)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda *a, **k: spy.hit())  # no CUDA here: count only
    # hpo's wrapper, wherever a module imported it by name (it returns at once on CPU).
    wrapper = runtime.synchronize
    for module in [m for name, m in sys.modules.items() if name.startswith("hpo.") and m is not None]:
        if getattr(module, "synchronize", None) is wrapper:
            counted(module, "synchronize")
    scaler_step = torch.amp.GradScaler._maybe_opt_step

    def maybe_opt_step(self, *args, **kwargs):
        spy.in_scaler = True
        try:
            return scaler_step(self, *args, **kwargs)
        finally:
            spy.in_scaler = False

    monkeypatch.setattr(torch.amp.GradScaler, "_maybe_opt_step", maybe_opt_step)
    with spy:
        yield spy


def _assembled(config) -> AssembledModel:
    torch.manual_seed(0)
    return AssembledModel(create_workload(config.workload, config.workload_options), config.knobs, config.training, CPU)


def _config(precision="fp32", optimizer="forloop", *, check_every=5, max_steps=12, eval_every=6, grad_clip=1.0, **options):
    config = toy_config(
        Knobs(precision=precision, attention="eager", optimizer=optimizer), max_steps=max_steps, eval_every=eval_every, **options
    )
    training = dataclasses.replace(config.training, grad_clip=grad_clip, check_every=check_every)
    return dataclasses.replace(config, training=training)


def _spied_train(monkeypatch, config, on_eval=None):
    assembled = _assembled(config)
    with spying(monkeypatch, assembled) as spy:
        batches = assembled.workload.train_batches
        monkeypatch.setattr(assembled.workload, "train_batches", lambda *a: spy.batches(batches(*a)))
        result = trainer.train(assembled, config, on_eval=on_eval)
    return spy, result


def test_the_spy_sees_the_syncs_it_counts(monkeypatch):
    """The control: each kind of host read an old step made is counted once, at its step."""
    config = _config("fp16")
    assembled = _assembled(config)
    loss = torch.tensor(1.0)
    assembled.scaler.scale(loss)  # the scale tensor exists from the first scaled loss on
    with spying(monkeypatch, assembled) as spy:
        spy.step = 3
        bool(torch.isfinite(loss))
        float(loss), int(loss)
        assembled.scaler.get_scale()
        loss.tolist()
        loss.cpu()
        runtime.synchronize(CPU)
        torch.cuda.synchronize()
    assert spy.syncs == {3: 8}


@pytest.mark.parametrize(
    "precision,optimizer",
    [("fp32", "forloop"), ("fp32", "fused"), ("bf16", "foreach"), ("fp16", "fused"), ("fp16", "forloop")],
)
@pytest.mark.parametrize("grad_clip", [0.0, 1.0])
def test_train_reads_the_device_only_at_check_boundaries(monkeypatch, precision, optimizer, grad_clip):
    """12 steps, a check every 5, an evaluation every 6: boundaries after steps 0 (the profiled
    step), 4, 5 (evaluation), 9 and 11 (the last). Every other step makes no host read at all."""
    spy, result = _spied_train(monkeypatch, _config(precision, optimizer, grad_clip=grad_clip))
    assert result.steps == 12
    boundaries = {0, 4, 5, 9, 11}
    assert {step: n for step, n in spy.syncs.items() if step not in boundaries} == {}
    assert all(spy.syncs[step] >= 1 for step in boundaries)  # the health read happens there
    # fp16 with a for-loop optimizer: GradScaler.step reads its inf flag to skip or take each step
    # (torch/amp/grad_scaler.py `_maybe_opt_step`), as in any loop; a fused optimizer skips on the device.
    expected = {step: 1 for step in range(12)} if (precision, optimizer) == ("fp16", "forloop") else {}
    assert dict(spy.scaler_syncs) == expected


def test_a_check_every_step_reads_at_every_step(monkeypatch):
    """The interval is what decides: check_every 1 reads after each step."""
    spy, _ = _spied_train(monkeypatch, _config(check_every=1, max_steps=4, eval_every=4))
    assert set(spy.syncs) >= {0, 1, 2, 3}


@pytest.mark.parametrize("precision", ["fp32", "fp16"])
def test_a_nan_between_boundaries_ends_the_trial_diverged_at_its_step_before_any_evaluation(monkeypatch, precision):
    """NaN at step 6, no boundary: found at the boundary after step 9, reported at step 6; the
    evaluation after step 5 (before the NaN) is the only one, so no metric comes from a model
    trained past it."""
    config = _config(precision, "fused", nan_at_step=6)
    assembled = _assembled(config)
    evaluated, reports = [], []
    evaluate = assembled.evaluate
    monkeypatch.setattr(assembled, "evaluate", lambda: evaluated.append(assembled.workload) or evaluate())
    with pytest.raises(TrialRejected, match=r"^diverged: step 6: loss is nan$"):
        trainer.train(assembled, config, on_eval=lambda step, metrics: reports.append(step))
    assert reports == [6] and len(evaluated) == 1


def test_a_nan_before_an_evaluation_is_caught_before_it_evaluates(monkeypatch):
    """An evaluation is a boundary: the NaN at step 4 ends the trial there, unevaluated."""
    config = _config(check_every=50, max_steps=12, eval_every=6, nan_at_step=4)
    reports = []
    with pytest.raises(TrialRejected, match=r"^diverged: step 4: loss is nan$"):
        trainer.train(_assembled(config), config, on_eval=lambda step, metrics: reports.append(step))
    assert reports == []


@pytest.mark.parametrize("precision", ["fp32", "fp16"])
def test_the_step_itself_raises_nothing_and_the_boundary_names_the_first_bad_step(precision):
    config = _config(precision, nan_at_step=1)
    assembled = _assembled(config)
    batches = assembled.workload.train_batches(16, 0)
    for step in range(4):
        run_step(assembled, next(batches), step)
    with pytest.raises(NonFiniteLoss, match="^step 1: loss is nan$"):
        assembled.check_health(3)
    if precision == "fp16":  # GradScaler skipped the NaN step: the scale backed off once
        assert assembled.scaler.get_scale() == pytest.approx(65536.0 * assembled.scaler.get_backoff_factor())


def test_a_restart_forgets_what_the_probe_saw():
    config = _config(nan_at_step=0)
    assembled = _assembled(config)
    state = {k: v.clone() for k, v in assembled.model.state_dict().items()}
    run_step(assembled, next(assembled.workload.train_batches(16, 0)), 0)
    assembled.restart(state)
    assert math.isnan(assembled.check_health(0))  # no step since the restart, and no NaN step either


def test_fp16_inf_gradients_skip_the_update_on_the_device(monkeypatch):
    """A scale so large that the scaled loss overflows: inf gradients from a finite loss. The fused
    optimizer skips the update inside its kernel, the scale backs off, and nothing is read."""
    config = _config("fp16", "fused")
    assembled = _assembled(config)
    batches = assembled.workload.train_batches(16, 0)
    run_step(assembled, next(batches), 0)
    assembled.scaler.update(new_scale=3e38)
    before = {k: v.clone() for k, v in assembled.model.state_dict().items()}
    with spying(monkeypatch, assembled) as spy:
        run_step(assembled, next(batches), 1)
    assert spy.syncs == {} and spy.scaler_syncs == {}
    after = assembled.model.state_dict()
    assert all(torch.equal(before[k], after[k]) for k in before)  # skipped, as GradScaler.step skips
    assert assembled.scaler.get_scale() == pytest.approx(3e38 * assembled.scaler.get_backoff_factor(), rel=1e-6)
    assembled.check_health(1)  # the loss was finite: no divergence


def test_a_collapsed_fp16_scale_is_rejected_at_the_boundary_from_the_scale_on_the_device(monkeypatch):
    config = _config("fp16", "fused")
    assembled = _assembled(config)
    run_step(assembled, next(assembled.workload.train_batches(16, 0)), 0)
    assembled.scaler.update(new_scale=2.0**-15)
    monkeypatch.setattr(assembled.scaler, "get_scale", lambda: pytest.fail("the boundary reads the device tensor"))
    with pytest.raises(TrialRejected, match=r"^diverged: step 7: fp16 GradScaler scale collapsed to 3.05e-05"):
        assembled.check_health(7)


def test_the_lightning_callback_reads_the_device_only_at_check_boundaries(monkeypatch):
    """hpo's callback around Lightning's own loop: 12 steps, a check every 5, validation every 6.
    Steps 0 (profiled), 4, 5 (validation), 9 and 11 read the device; no other step does, whatever
    Lightning itself does around them."""
    from hpo.trial import _lightning_loop as lightning_loop

    config = _config(d_model=16, n_heads=2, seq_len=8, n_blocks=1)
    config = dataclasses.replace(config, workload="toy_lightning:ToyLightning")
    workload = create_workload(config.workload, config.workload_options)
    workload.bind_training(config.training.params())
    made, make_class = [], lightning_loop.callback_class

    def spied_class():
        class Spied(make_class()):
            def __init__(self, *args):
                super().__init__(*args)
                made.append(self)

            def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
                spy.step = trainer.global_step
                super().on_train_batch_start(trainer, pl_module, batch, batch_idx)

        return Spied

    monkeypatch.setattr(lightning_loop, "callback_class", spied_class)
    with spying(monkeypatch, optimizer=lambda: getattr(made[0].view, "optimizer", None) if made else None) as spy:
        result = lightning_loop.train_lightning(workload, config, CPU)
    assert result.steps == 12
    boundaries = {0, 4, 5, 9, 11}
    # Step -1 is Lightning's set-up before the first batch (once per fit, not per step).
    assert {step: n for step, n in spy.syncs.items() if step not in boundaries | {-1}} == {}
    assert all(spy.syncs[step] >= 1 for step in boundaries)
