"""A workload's model assembled with one trial's knobs: the single place the knobs are applied.

Both the pre-trial probe and the trainer step through an `AssembledModel`, so what the probe
verified is exactly what trains.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Iterator

import torch

from hpo.config.trial import Knobs, TrainingConfig
from hpo.engine._health import DeviceHealth, NonFiniteLoss
from hpo.errors import TrialRejected
from hpo.hardware import MemoryMeter
from hpo.knobs.adamw_builders import build_optimizer, clear_grads
from hpo.knobs.attention_kernels import pinned_kernel
from hpo.knobs.compiled_graphs import GraphRecord, compile_model
from hpo.knobs.precision_plugins import precision_plugin
from hpo.knobs.recompute import RecomputeCounter, count_block_runs, enable_checkpointing
from hpo.knobs.systems import applied_to_process, read_in_step
from hpo.torch_compat import fail_on_recompile_limit, scale_on_device
from hpo.verdicts import Kind, Verdict
from hpo.workloads.base import Batch, Workload

# Below this the fp16 loss scale has backed off ~2^-30 from its start: gradients are inf every step.
MIN_GRAD_SCALE = 2.0**-14
RECOMPILE_LIMIT = 64


class AssembledModel:
    def __init__(self, workload: Workload, knobs: Knobs, training: TrainingConfig, device: torch.device):
        self.workload, self.knobs, self.training, self.device = workload, knobs, training, device
        self._knob_values = knobs.as_dict()  # read around every step: made once, not per step
        self.precision = precision_plugin(knobs.precision, device.type)
        self.model = self.precision.convert_module(_built_on(device, workload, knobs.attention))
        self.recompute = RecomputeCounter()
        blocks = workload.checkpoint_blocks(self.model)
        if knobs.grad_checkpointing:
            enable_checkpointing(blocks, self.recompute)
        elif not knobs.compile:  # compiled graphs show checkpointing themselves; wrappers only add frames
            count_block_runs(blocks, self.recompute)
        self.graphs = GraphRecord()
        self.in_step: dict = {}  # each knob's setting as the last step read it (hpo.knobs.systems.read_in_step)
        self.forward_model = (
            compile_model(self.model, knobs.compile, training.compile_backend, self.graphs, knobs=self._knob_values)
            if knobs.compile
            else self.model
        )
        self._fresh_training_state()

    def _fresh_training_state(self) -> None:
        self.optimizer = build_optimizer(
            self.knobs.optimizer, self.model.parameters(), lr=self.training.lr, weight_decay=self.training.weight_decay
        )
        # A function of the warm-up length, not a bound method: a scheduler holding `self._warmup`
        # would make this object refer to itself, kept alive (with its weights and optimizer state)
        # until the next gc.collect after its last user dropped it.
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(
            self.optimizer, functools.partial(warmup_factor, self.training.warmup_steps)
        )
        self.scaler = self.precision.scaler  # fp16's GradScaler, or None
        self.memory = MemoryMeter(self.device)
        self.health = DeviceHealth(self.device)  # the probe's steps never count against training

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
        self.precision = precision_plugin(self.knobs.precision, self.device.type)  # a new GradScaler
        self._fresh_training_state()

    @contextlib.contextmanager
    def knob_context(self) -> Iterator[None]:
        with self._process_context(), self.precision.forward_context(), self._no_eager_fallback():
            yield

    @contextlib.contextmanager
    def _process_context(self) -> Iterator[None]:
        """The pinned SDPA kernel and every process knob's setting, around forward and backward alike."""
        with pinned_kernel(self.knobs.attention), applied_to_process(self._knob_values, self.device.type):
            yield

    def _no_eager_fallback(self) -> contextlib.AbstractContextManager:
        """Past its recompile limit Dynamo quietly runs a frame uncompiled; here that is an error,
        so a trial labelled compiled ran compiled. The limit is raised for the legitimate recompiles
        (train/eval, one frame per block when the model has graph breaks)."""
        if not self.knobs.compile:
            return contextlib.nullcontext()
        return fail_on_recompile_limit(RECOMPILE_LIMIT)

    def move(self, batch: Batch) -> Batch:
        non_blocking = self.device.type == "cuda"
        return {k: v.to(self.device, non_blocking=non_blocking) for k, v in batch.items()}

    def forward_backward(self, batch: Batch) -> torch.Tensor:
        """Loss forward under the knobs, then backward (scaled for fp16). Returns the unscaled loss."""
        with self.knob_context():
            self.in_step = read_in_step(self._knob_values, self.device.type)
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


def _built_on(device: torch.device, workload: Workload, attention: str) -> torch.nn.Module:
    """The workload's model, created on `device`: under the device as torch's default, parameters
    are allocated and initialised there, not on the CPU and then copied. The `.to` moves what a
    workload created elsewhere on purpose (a checkpoint loaded to the CPU), and is free otherwise."""
    if device.type == "cpu":
        return workload.build_model(attention)
    with torch.device(device):
        return workload.build_model(attention).to(device)
