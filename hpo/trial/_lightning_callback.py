"""The callback through which hpo watches a Lightning trial (`hpo.trial._lightning_loop`): it profiles
one training step to observe what ran, times the steady-state steps and counts training time as
hpo's loop does, samples memory, stops on a non-finite loss or a collapsed fp16 scale, clips
gradients, and reports each validation to the study (which may prune) and to the target.

As in hpo's loop (`hpo.trial._trainer`), an ordinary step makes no host read: the loss goes into a
`DeviceHealth` and the step into a `StepTimer`, both read at check boundaries (every
`check_every` steps, the profiled step, the last step, a budget the host clock says may be spent,
and the start of each validation, so no metric is taken from a model trained past a NaN).

This module imports Lightning: its one caller (`hpo.trial._lightning_loop.callback_class`) imports it
when a Lightning trial runs, so that `hpo` imports without Lightning."""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterator
from types import SimpleNamespace

import lightning.pytorch as pl
import torch

from hpo.config.trial import TrialConfig
from hpo.engine import MIN_GRAD_SCALE, DeviceHealth
from hpo.errors import TrialRejected
from hpo.evidence.capture import capture_step
from hpo.evidence.observe import mismatch_verdict, mismatches, observed_knobs
from hpo.hardware import step_timer
from hpo.knobs.systems import read_in_step
from hpo.torch_compat import scale_on_device, unscales_in_its_step
from hpo.trial._step_tally import StepTally
from hpo.trial._trainer import evidence_step_index
from hpo.verdicts import Kind, Verdict
from hpo.workloads.lightning import LightningWorkload, as_dict

__all__ = ["HpoCallback"]


class HpoCallback(pl.Callback):
    """hpo's watch over one Lightning fit (see the module's docstring)."""

    def __init__(self, view: SimpleNamespace, config: TrialConfig, workload: LightningWorkload, on_eval):
        self.view, self.config, self.workload, self.on_eval = view, config, workload, on_eval
        self.evidence_at = evidence_step_index(config)
        self.tally, self.timer = StepTally(self.evidence_at), step_timer(view.device)
        self.health = DeviceHealth(view.device)
        self.history, self.observed, self.reached = [], {}, None
        self._capture = None

    @property
    def step_times(self) -> list[float]:
        return self.tally.step_times

    @property
    def samples(self) -> int:
        return self.tally.samples

    @property
    def train_s(self) -> float:  # training time as hpo's loop counts it
        return self.tally.train_s

    @contextlib.contextmanager
    def capture_closed(self) -> Iterator[None]:
        """However fit ends, the evidence capture is closed: a step that raises between its
        batch start and end would otherwise leave the profiler and the dtype recorder running
        for the rest of the process (every later trial of an in-process worker)."""
        try:
            yield
        finally:
            if self._capture is not None:
                capture, self._capture = self._capture, None
                capture.__exit__(None, None, None)

    def on_fit_start(self, trainer, pl_module) -> None:
        self.view.optimizer = trainer.optimizers[0]
        self.view.scaler = getattr(trainer.precision_plugin, "scaler", None)

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        if trainer.global_step == self.evidence_at:
            self.view.in_step = read_in_step(self.view.knobs.as_dict(), self.view.device.type)
            self._capture = capture_step(self.view)
            self._evidence = self._capture.__enter__()
        self.timer.start()

    def on_before_backward(self, trainer, pl_module, loss) -> None:
        self.view.memory.sample()  # activations are alive: the step's high-water mark
        self.health.record(trainer.global_step, loss)

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        self.timer.stop()
        step = trainer.global_step - 1
        self.tally.ended(step, self.workload.samples_in(as_dict(batch)))
        if not (self._capture is not None or self._due(step)):
            return
        profiled = self._close_capture()
        self.check(step)  # a NaN in the profiled step is divergence before it is anything else
        if profiled:
            self._judge_evidence()
        budget = self.config.training.budget_s
        if budget is not None and self.tally.train_s >= budget:
            trainer.should_stop = True

    def _due(self, step: int) -> bool:
        """Whether `step` ends at a check boundary: every `check_every` steps, the last step, or a
        budget the host clock says may be spent."""
        training = self.config.training
        budget = training.budget_s
        spent = budget is not None and self.tally.train_s + self.timer.host_s >= budget
        return spent or (step + 1) % training.check_every == 0 or step + 1 == training.max_steps

    def _close_capture(self) -> bool:
        """End the evidence capture if this step was the profiled one; whether it was."""
        if self._capture is None:
            return False
        self._capture.__exit__(None, None, None)
        self._capture = None
        return True

    def _judge_evidence(self) -> None:
        """What the profiled step observed, against the knobs the trial was asked to run."""
        self.observed = observed_knobs(self._evidence)
        problems = mismatches(self.config.knobs, self.observed)
        if problems:
            raise TrialRejected(mismatch_verdict(Kind.MISMATCH, problems, self.config.knobs), observed=self.observed)

    def check(self, step: int) -> None:
        """A check boundary: the step times and the health the steps kept on the device."""
        scaler = self.view.scaler
        reading = self.health.read(scale_on_device(scaler) if scaler is not None else None)
        self.tally.add(self.timer.read())
        if reading.first_bad_step is not None:
            detail = f"step {reading.first_bad_step}: loss is {reading.first_bad_loss}"
            raise TrialRejected(Verdict.make(Kind.DIVERGED, detail))
        if reading.scale is not None and reading.scale < MIN_GRAD_SCALE:
            detail = f"step {step}: fp16 GradScaler scale collapsed to {reading.scale:.3g}"
            raise TrialRejected(Verdict.make(Kind.DIVERGED, detail))

    def on_validation_start(self, trainer, pl_module) -> None:
        if not trainer.sanity_checking:
            self.check(trainer.global_step - 1)

    def on_train_end(self, trainer, pl_module) -> None:
        self.check(trainer.global_step - 1)  # the steps since the last boundary count too

    def on_before_optimizer_step(self, trainer, pl_module, optimizer) -> None:
        # hpo clips here rather than through Lightning's gradient_clip_val, which refuses a fused
        # optimizer under mixed precision; like hpo's loop, unscale first (Lightning leaves a
        # fused optimizer's gradients scaled, since its step would unscale them itself).
        clip = self.config.training.grad_clip
        if clip <= 0:
            return
        scaler = self.view.scaler
        if scaler is not None and unscales_in_its_step(optimizer):
            scaler.unscale_(optimizer)
        torch.nn.utils.clip_grad_norm_(pl_module.parameters(), clip)

    def on_validation_end(self, trainer, pl_module) -> None:
        if trainer.sanity_checking:
            return
        metrics = {k: float(v) for k, v in trainer.callback_metrics.items() if k in self.workload.metrics}
        bad = {k: v for k, v in metrics.items() if not math.isfinite(v)}
        if bad:
            detail = f"step {trainer.global_step}: non-finite eval metrics {bad}"
            raise TrialRejected(Verdict.make(Kind.DIVERGED, detail))
        self.history.append((trainer.global_step, metrics))
        if self.on_eval is not None:
            self.on_eval(trainer.global_step, metrics)
        target = self.config.training.target
        if target is not None and self.reached is None and target.reached(metrics):
            self.reached, trainer.should_stop = self.train_s, True
