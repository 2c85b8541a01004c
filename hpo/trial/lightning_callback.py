"""The callback through which hpo watches a Lightning trial (`hpo.trial.lightning_loop`): it profiles
one training step to observe what ran, times the steady-state steps and counts training time as
hpo's loop does, samples memory, stops on a non-finite loss or a collapsed fp16 scale, clips
gradients, and reports each validation to the study (which may prune) and to the target."""

from __future__ import annotations

import contextlib
import math
import time
from collections.abc import Iterator
from types import SimpleNamespace

import torch

from hpo.config.trial import TrialConfig
from hpo.engine.assembly import MIN_GRAD_SCALE
from hpo.errors import TrialRejected
from hpo.evidence.capture import capture_step
from hpo.evidence.observe import mismatch_verdict, mismatches, observed_knobs
from hpo.hardware.runtime import synchronize
from hpo.torch_compat import unscales_in_its_step
from hpo.trial.trainer import evidence_step_index
from hpo.verdicts import Kind, Verdict
from hpo.workloads.lightning import LightningWorkload, as_dict

__all__ = ["callback_class"]


def callback_class():
    """The callback class, defined on first use so that importing this module needs no Lightning."""
    import lightning.pytorch as pl

    class HpoCallback(pl.Callback):
        def __init__(self, view: SimpleNamespace, config: TrialConfig, workload: LightningWorkload, on_eval):
            self.view, self.config, self.workload, self.on_eval = view, config, workload, on_eval
            self.evidence_at = evidence_step_index(config)
            self.step_times, self.samples, self.history, self.observed = [], 0, [], {}
            self.train_s, self.reached = 0.0, None  # training time as hpo's loop counts it
            self._capture, self._start = None, 0.0

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
                self._capture = capture_step(self.view)
                self._evidence = self._capture.__enter__()
            synchronize(self.view.device)
            self._start = time.perf_counter()

        def on_before_backward(self, trainer, pl_module, loss) -> None:
            self.view.memory.sample()  # activations are alive: the step's high-water mark
            if not torch.isfinite(loss.detach()):
                raise TrialRejected(Verdict.make(Kind.DIVERGED, f"step {trainer.global_step}: loss is {loss.item()}"))

        def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
            synchronize(self.view.device)
            step = trainer.global_step - 1
            if self._capture is not None:
                self._capture.__exit__(None, None, None)
                self._capture = None
                self.observed = observed_knobs(self._evidence)
                problems = mismatches(self.config.knobs, self.observed)
                if problems:
                    raise TrialRejected(mismatch_verdict(Kind.MISMATCH, problems, self.config.knobs), observed=self.observed)
            else:  # the profiled step's cost is hpo's profiler, not the knobs'
                self.train_s += time.perf_counter() - self._start
            if step > self.evidence_at:
                self.step_times.append(time.perf_counter() - self._start)
                self.samples += self.workload.samples_in(as_dict(batch))
            budget = self.config.training.budget_s
            if budget is not None and self.train_s >= budget:
                trainer.should_stop = True
            scaler = self.view.scaler
            if scaler is not None and scaler.get_scale() < MIN_GRAD_SCALE:
                detail = f"step {step}: fp16 GradScaler scale collapsed to {scaler.get_scale():.3g}"
                raise TrialRejected(Verdict.make(Kind.DIVERGED, detail))

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

    return HpoCallback
