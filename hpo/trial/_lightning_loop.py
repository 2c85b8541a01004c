"""Train a `LightningWorkload` trial through Lightning's own Trainer, with hpo's knobs mapped onto
Lightning's mechanisms and the same evidence, guards and records as hpo's loop.

- precision: the Lightning string of hpo's precision plugin (fp32 -> "32-true", bf16 -> "bf16-mixed",
  fp16 -> "16-mixed", with Lightning's GradScaler);
- optimizer implementation: the optimizer `configure_optimizers` returns is rebuilt with the trial's
  implementation (same class, groups and hyperparameters), or the trial gets a verdict;
- the module is built and changed by the knobs' own hooks, as hpo's loop builds its model
  (`hpo.knobs.model_hooks` stages 1-3: attention through hpo's attention function, which the
  workload receives; gradient checkpointing on the workload's blocks; torch.compile of the module),
  and every knob's around-step setting (the pinned SDPA kernel, the process knobs) is in force for
  the whole fit. Lightning's Trainer runs the step itself, so the hooks' forward regions and
  optimizer stage are replaced by its precision string and the rebuilt optimizer above.

A callback (`hpo.trial._lightning_callback`) profiles one training step to observe what ran, times
the steady-state steps, samples memory, stops on a non-finite loss or a collapsed fp16 scale, and
reports each validation to the study (which may prune). Lightning writes no logs or checkpoints: they are off, and its root folder
is a temporary one, so nothing lands in the working directory.
"""

from __future__ import annotations

import contextlib
import logging
import statistics
import tempfile
import warnings
from types import SimpleNamespace

import torch

from hpo.config.trial import TrialConfig
from hpo.errors import KnobUnavailable
from hpo.hardware import MemoryMeter
from hpo.knobs.compiled_graphs import GraphRecord
from hpo.knobs.model_hooks import apply_to_model, build_kwargs
from hpo.knobs.optimizer_impl import with_implementation
from hpo.knobs.precision_plugins import PrecisionPlugin, precision_plugin
from hpo.knobs.recompute import RecomputeCounter
from hpo.knobs.registry import PRECISION_SPECS
from hpo.knobs.systems import applied_to_process, model_hooks
from hpo.torch_compat import install_scheduler_tracked_step
from hpo.trial._lightning_ranks import LightningRanks
from hpo.trial._trainer import EvalCallback, TrainResult
from hpo.workloads.lightning import LightningWorkload

__all__ = ["callback_class", "lightning_device", "lightning_precision", "train_lightning"]


def lightning_precision(precision: str, device_type: str) -> str:
    """Lightning's precision string for hpo's precision knob value, from hpo's precision plugin."""
    return precision_plugin(precision, device_type).lightning


def _closure_first(optimizer: torch.optim.Optimizer) -> torch.optim.Optimizer:
    """Lightning hands its training closure (forward, backward, gradient clipping) to
    `optimizer.step`, and torch runs it inside the step's profiler range, where clipping's foreach
    kernels would pass for the optimizer's. Run the closure first, as torch's optimizers do
    themselves, so the range holds only the update and the optimizer's evidence is its own."""
    update = optimizer.step

    def step(closure=None):
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        update()
        return loss

    install_scheduler_tracked_step(optimizer, step)  # the scheduler checks for its wrapper; this one does its job
    return optimizer


def _rebuilt(optimizer: torch.optim.Optimizer, impl: str) -> torch.optim.Optimizer:
    return _closure_first(with_implementation(optimizer, impl))


def _rebuild_optimizers(returned, impl: str):
    """`configure_optimizers`' return value with every optimizer rebuilt for `impl`; schedulers are
    pointed at the rebuilt optimizer (they keep their state: initial_lr lives in the groups)."""
    if isinstance(returned, torch.optim.Optimizer):
        return _rebuilt(returned, impl)
    if isinstance(returned, dict):
        new = dict(returned, optimizer=_rebuilt(returned["optimizer"], impl))
        scheduler = new.get("lr_scheduler")
        target = scheduler.get("scheduler") if isinstance(scheduler, dict) else scheduler
        if target is not None:
            target.optimizer = new["optimizer"]
        return new
    raise KnobUnavailable(
        "optimizer: hpo applies the optimizer knob to configure_optimizers returning one optimizer "
        f"or a dict with 'optimizer'; got {type(returned).__name__}"
    )


def train_lightning(
    workload: LightningWorkload,
    config: TrialConfig,
    device: torch.device,
    on_eval: EvalCallback | None = None,
    ranks: LightningRanks | None = None,
) -> TrainResult:
    """Fit the trial's module with Lightning's Trainer on `device`; with `ranks`, as one rank of the
    group hpo's launcher started and joined (`hpo.trial._lightning_ranks`), under Lightning's DDP."""
    knobs, training = config.knobs, config.training
    _refuse_fp16_on_cpu(knobs.precision, device)
    view = _assembled(workload, config, device)
    module = view.model
    original = module.configure_optimizers
    module.configure_optimizers = lambda: _rebuild_optimizers(original(), knobs.optimizer)
    callback = callback_class()(view, config, workload, on_eval)
    train_loader, val_loader = workload.build_loaders(training.batch_size, config.seed)
    placement = lightning_device(device) if ranks is None else ranks.trainer_args(device)
    callbacks = [callback] if ranks is None else [callback, ranks.callback(workload, config)]
    if ranks is not None:
        train_loader = ranks.rows_of_rank(train_loader, training.batch_size)
    _fit(config, view, placement, callbacks, (train_loader, val_loader))
    return _result(callback, module, view)


def callback_class() -> type:
    """hpo's Lightning callback class, imported on first use: its module imports Lightning, which
    `hpo` must import without."""
    from hpo.trial._lightning_callback import HpoCallback

    return HpoCallback


def _refuse_fp16_on_cpu(precision: str, device: torch.device) -> None:
    """Lightning's accelerator connector swaps 16-mixed for bf16-mixed on CPU with a warning: refused
    instead, so that no trial is labelled with a precision it did not run."""
    if PRECISION_SPECS[precision].lightning == "16-mixed" and device.type == "cpu":
        raise KnobUnavailable(
            f"precision={precision}: Lightning's Trainer runs no {precision} mixed precision on CPU "
            "(it would substitute bf16-mixed); use bf16, or hpo's own loop for fp16",
            [("precision", precision)],
        )


def _fit(config: TrialConfig, view: SimpleNamespace, placement: dict, callbacks: list, loaders: tuple) -> None:
    """Lightning's fit of the assembled module (`callbacks[0]` is hpo's), then a validation at the
    last step if the fit's last one was earlier, in a temporary root folder."""
    callback, (train_loader, val_loader), fitted = callbacks[0], loaders, view.forward_model
    with tempfile.TemporaryDirectory(prefix="hpo-lightning-") as root, _quiet_lightning():
        trainer = _trainer(config, placement, callbacks, root, view.precision.lightning)
        # Every knob's around-step setting, as in hpo's loop, for the whole fit, its steps and validations
        # alike: the pinned SDPA kernel (SDPA raises rather than quietly dispatching another), the process knobs.
        with applied_to_process(view.values, view.device.type), callback.capture_closed():
            trainer.fit(fitted, train_loader, val_loader)
            if not callback.history or callback.history[-1][0] != trainer.global_step:
                trainer.validate(fitted, val_loader, verbose=False)  # the final metrics, at the last step


def _assembled(workload: LightningWorkload, config: TrialConfig, device: torch.device) -> SimpleNamespace:
    """The workload's LightningModule built and changed by the knobs' hooks (`model`; `forward_model`,
    what Lightning fits; `precision`, whose `lightning` string the Trainer runs), with what the callback reads beside it: the evidence the hooks' wrappers
    record (`recompute`, `graphs`), the memory meter and the in-step readings."""
    values = config.knobs.as_dict()
    hooks = model_hooks(values)
    view = SimpleNamespace(
        workload=workload, training=config.training, device=device, knobs=config.knobs, values=values,
        precision=PrecisionPlugin(), recompute=RecomputeCounter(), graphs=GraphRecord(), memory=MemoryMeter(device), in_step={},
    )  # fmt: skip
    view.model = workload.build_model(**build_kwargs(hooks))
    apply_to_model(view, hooks)
    return view


def _trainer(config: TrialConfig, placement: dict, callbacks: list, root: str, precision: str):
    """Lightning's Trainer for the trial: `precision` as the precision knob's plugin names it, hpo's schedule, no logs or
    checkpoints; `placement` is its accelerator, devices and (on ranks) strategy."""
    import lightning.pytorch as pl

    training = config.training
    return pl.Trainer(
        **placement, precision=precision,
        max_steps=training.max_steps, val_check_interval=training.eval_every, check_val_every_n_epoch=None,
        num_sanity_val_steps=0, logger=False, enable_checkpointing=False,
        enable_progress_bar=False, enable_model_summary=False, default_root_dir=root, callbacks=callbacks,
    )  # fmt: skip


def lightning_device(device: torch.device) -> dict:
    """Lightning's accelerator and devices for hpo's resolved device: the same GPU index hpo's
    meter and evidence use (`devices=1` would let Lightning pick its own first device)."""
    if device.type == "cuda":
        index = device.index if device.index is not None else torch.cuda.current_device()
        return {"accelerator": "gpu", "devices": [index]}
    return {"accelerator": "cpu", "devices": 1}


def _result(callback, module: torch.nn.Module, view: SimpleNamespace) -> TrainResult:
    step_s = statistics.median(callback.step_times) if callback.step_times else float("nan")
    return TrainResult(
        metrics=callback.history[-1][1],
        knobs_observed=callback.observed,
        step_time_ms=1000 * step_s,
        train_samples_per_s=callback.tally.train_samples_per_s(),
        steady_samples_per_s=callback.tally.steady_samples_per_s(),
        peak_mem_mb=view.memory.peak_mb,
        n_params=sum(p.numel() for p in module.parameters()),
        steps=callback.history[-1][0],
        train_s=callback.train_s,
        time_to_target_s=callback.reached,
    )


@contextlib.contextmanager
def _quiet_lightning():
    """Lightning logs "GPU available: ...", "`Trainer.fit` stopped: ..." at INFO on every fit."""
    loggers = [logging.getLogger(name) for name in ("lightning.pytorch", "lightning.fabric")]
    levels = [lg.level for lg in loggers]
    for lg in loggers:
        lg.setLevel(logging.WARNING)
    try:
        with warnings.catch_warnings():
            # Lightning 2.6 on torch 2.13 warns of its own use of a deprecated pytree API on every fit.
            warnings.filterwarnings("ignore", message=".*isinstance\\(treespec, LeafSpec\\).*")
            # On ranks, each validates the whole validation set on the same weights: its metrics are
            # the group's, with nothing to reduce (Lightning recommends sync_dist=True in any group).
            warnings.filterwarnings("ignore", message=".*sync_dist=True.*")
            yield
    finally:
        for lg, level in zip(loggers, levels):
            lg.setLevel(level)
