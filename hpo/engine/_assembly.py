"""A workload's model assembled with one trial's knobs: the single place the knobs are applied.

Each model and optimizer knob is applied by its own hook (`Knob.model_hook()`, a
`hpo.knobs.model_hooks.ModelHook`), stage by stage, in the order that module states; nothing here
names a knob. Both the pre-trial probe and the trainer step through an `AssembledModel`, so what the
probe verified is exactly what trains.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Iterator
from typing import Any

import torch

from hpo.config.trial import Knobs, TrainingConfig
from hpo.engine._health import DeviceHealth, NonFiniteLoss
from hpo.errors import TrialRejected
from hpo.hardware import MemoryMeter
from hpo.knobs.adamw_builders import clear_grads
from hpo.knobs.compiled_graphs import GraphRecord
from hpo.knobs.model_hooks import apply_to_model, build_kwargs, fills_in
from hpo.knobs.precision_plugins import PrecisionPlugin
from hpo.knobs.recompute import RecomputeCounter
from hpo.knobs.systems import entered, model_hooks, read_in_step, step_settings
from hpo.torch_compat import scale_on_device
from hpo.verdicts import Kind, Verdict
from hpo.workloads.base import Batch, Workload

# Below this the fp16 loss scale has backed off ~2^-30 from its start: gradients are inf every step.
MIN_GRAD_SCALE = 2.0**-14


class AssembledModel:
    """A workload's model with every knob's hook applied (`hpo.knobs.model_hooks`): `model` is the
    module, `forward_model` what the step calls, `precision` the plugin that runs backward, clipping
    and the optimizer step (the plain fp32 one until a hook sets its own), `recompute` and `graphs`
    the evidence the hooks' wrappers record."""

    forward_model: torch.nn.Module  # set by the hooks' stages (`apply_to_model`)

    def __init__(self, workload: Workload, knobs: Knobs, training: TrainingConfig, device: torch.device):
        self.workload, self.knobs, self.training, self.device = workload, knobs, training, device
        self.values: dict[str, Any] = knobs.as_dict()  # read around every step: made once, not per step
        self._hooks = model_hooks(self.values)
        # Entered around every forward (and backward): only the knobs whose setting does something.
        self._step_settings = step_settings(self.values)
        self._forward_regions = [(hook, value) for _, hook, value in self._hooks if fills_in(hook, "around_forward")]
        self.precision: PrecisionPlugin = PrecisionPlugin()
        self.recompute, self.graphs = RecomputeCounter(), GraphRecord()
        self.in_step: dict = {}  # each knob's setting as the last step read it (hpo.knobs.systems.read_in_step)
        self.model = _built_on(device, workload, build_kwargs(self._hooks))
        apply_to_model(self, self._hooks)  # sets forward_model too
        self._fresh_training_state()

    def _fresh_training_state(self) -> None:
        self.optimizer = self._built_optimizer()
        # A function of the warm-up length, not a bound method: a scheduler holding `self._warmup`
        # would make this object refer to itself, kept alive (with its weights and optimizer state)
        # until the next gc.collect after its last user dropped it.
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(
            self.optimizer, functools.partial(warmup_factor, self.training.warmup_steps)
        )
        self.scaler = self.precision.scaler  # fp16's GradScaler, or None
        self.memory = MemoryMeter(self.device)
        self.health = DeviceHealth(self.device)  # the probe's steps never count against training

    def _built_optimizer(self) -> torch.optim.Optimizer:
        """The optimizer over the final model's parameters, built by the one knob whose hook builds it."""
        built = {}
        for name, hook, value in self._hooks:
            optimizer = hook.build_optimizer(self, value, self.model.parameters())
            if optimizer is not None:
                built[name] = optimizer
        if len(built) != 1:
            raise RuntimeError(
                f"exactly one knob's hook builds a trial's optimizer (ModelHook.build_optimizer); {len(built)} did "
                f"({sorted(built)}): give one knob, and only one, a build_optimizer"
            )
        return next(iter(built.values()))

    def restart(self, state: dict[str, torch.Tensor] | None = None) -> None:
        """A fresh optimizer, warm-up, loss scale and memory meter, no gradients, train mode, and
        with `state` the weights back at it: a model the probe has stepped then trains exactly as
        a newly built one would, and the trial builds no second model. Compiled graphs are kept
        (they depend on no weights). The probe's compared step leaves the weights unchanged, so
        only a model timed with real updates (`hpo probe`) needs `state`."""
        if state is not None:
            self.model.load_state_dict(state)
        self.model.zero_grad(set_to_none=True)
        self.model.train()
        for _, hook, value in self._hooks:
            hook.restart(self, value)  # precision: a new GradScaler
        self._fresh_training_state()

    @contextlib.contextmanager
    def knob_context(self) -> Iterator[None]:
        """Every knob's setting around forward and evaluation: each one's around-step setting, then
        each hook's forward region (autocast, compile's refusal to fall back to eager)."""
        with self._process_context(), contextlib.ExitStack() as regions:
            for hook, value in self._forward_regions:
                regions.enter_context(hook.around_forward(self, value))
            yield

    def _process_context(self) -> contextlib.AbstractContextManager:
        """Every knob's setting around forward and backward alike (`Knob.applied`: the pinned SDPA
        kernel, each process knob's setting)."""
        return entered(self._step_settings, self.device.type)

    def move(self, batch: Batch) -> Batch:
        non_blocking = self.device.type == "cuda"
        return {k: v.to(self.device, non_blocking=non_blocking) for k, v in batch.items()}

    def forward_backward(self, batch: Batch) -> torch.Tensor:
        """Loss forward under the knobs, then backward (scaled for fp16). Returns the unscaled loss."""
        with self.knob_context():
            self.in_step = read_in_step(self.values, self.device.type)
            loss = self.workload.training_loss(self.forward_model, batch)
        self.memory.sample()  # activations are alive now: the step's high-water mark
        with self._process_context():
            self.precision.backward(loss)
        return loss.detach()

    def optimizer_step(self) -> None:
        """Clip (unscaled first under fp16) and update, with no host read: under fp16 GradScaler
        skips a step whose gradients hold inf/NaN, inside the kernel for fused optimizers; for the
        others GradScaler.step itself reads its inf flag (`_maybe_opt_step`), as in any loop."""
        self.precision.clip_gradients(self.model, self.optimizer, self.training.grad_clip)
        self.precision.optimizer_step(self.optimizer)
        clear_grads(self.optimizer)
        self.scheduler.step()

    def check_health(self, step: int) -> float:
        """A check boundary, after step `step`: the one host read of the health the steps since the
        last restart kept on the device. Raises NonFiniteLoss at the first step whose loss was not
        finite, and TrialRejected when the fp16 loss scale collapsed; returns the last step's loss."""
        scale = scale_on_device(self.scaler) if self.scaler is not None else None
        reading = self.health.read(scale)
        if reading.first_bad_step is not None:
            raise NonFiniteLoss(reading.first_bad_step, reading.first_bad_loss)
        self.check_scaler(step, reading.scale)
        return reading.loss

    def check_scaler(self, step: int, scale: float | None = None) -> None:
        """Reject a trial whose fp16 loss scale collapsed, judged on `scale` (the scale after step
        `step`'s update) or, without it, on a read of the scaler's own (a host sync)."""
        if self.scaler is None:
            return
        if scale is None:
            scale = self.scaler.get_scale()
        if scale < MIN_GRAD_SCALE:
            detail = (
                f"step {step}: fp16 GradScaler scale collapsed to {scale:.3g} "
                f"(< {MIN_GRAD_SCALE:.3g}), gradients overflow every step"
            )
            raise TrialRejected(Verdict.make(Kind.DIVERGED, detail))

    def evaluate(self) -> dict[str, float]:
        self.model.eval()
        try:
            with torch.inference_mode(), self.knob_context():
                return self.workload.evaluate(self.forward_model, self.move)
        finally:
            self.model.train()

    @property
    def n_params(self) -> int:
        return sum(p.numel() for p in self.model.parameters())


def warmup_factor(warmup_steps: int, step: int) -> float:
    """The learning rate's factor at `step` of a linear warm-up over `warmup_steps` (0: none)."""
    return 1.0 if warmup_steps == 0 else min(1.0, (step + 1) / warmup_steps)


def _built_on(device: torch.device, workload: Workload, build_kwargs: dict[str, Any]) -> torch.nn.Module:
    """The workload's model, built with the knobs' `build_kwargs` and created on `device`: under the
    device as torch's default, parameters are allocated and initialised there, not on the CPU and
    then copied. The `.to` moves what a workload created elsewhere on purpose (a checkpoint loaded
    to the CPU), and is free otherwise."""
    if device.type == "cpu":
        return workload.build_model(**build_kwargs)
    with torch.device(device):
        return workload.build_model(**build_kwargs).to(device)
