"""The trial's memory budget (`study.memory_limit_gb`): after the probe, before training.

Per knob combination a peak model (`hpo.hardware.memory_model`) is fitted to the peaks of real
steps on the trial's model at two small batch sizes, and kept in the study's verdict store beside
the knobs' verdict: a later trial of the same combination reads it and runs nothing. Then:

- a fixed batch predicted not to fit is rejected before it trains (`oom: predicted ... > limit ...
  at batch B (fits up to N)`), implicating the knobs and the batch size, so that the sampler does
  not propose the combination at that batch, or above it, again (`hpo.study.avoid`);
- `batch_size: auto` trains at the largest batch the model says fits, confirmed by one real step
  at that size; a confirming step over the limit adds its peak to the fit and the next size is
  tried, `CONFIRMATIONS` times at most.

The measured steps run forward, backward and an update at learning rate 0 (the first, unmeasured,
allocates the optimizer's state, which every training step after the first holds); the model is
then restarted at its initial weights and buffers, as the probe hands it on.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Callable

import torch

from hpo.config.lr_scaling import scaled_lr
from hpo.config.params import AutoBatch
from hpo.config.trial import TrialConfig
from hpo.engine.assembly import AssembledModel
from hpo.errors import UserInputError
from hpo.hardware.memory import MemoryMeter, ResidentPeak, hand_back_freed
from hpo.hardware.memory_cap import is_out_of_memory
from hpo.hardware.memory_model import GB, PeakModel, fit_peaks, limit_bytes
from hpo.hardware.runtime import seed_everything
from hpo.knobs.optimizers import learning_rate_zero
from hpo.records import RecordKey
from hpo.trial.outcome import TrialOutcome, ended
from hpo.trial.run import TrialRun
from hpo.verdicts import Kind, Verdict
from hpo.verify.cache import VerdictStore
from hpo.workloads.base import Workload

__all__ = [
    "CONFIRMATIONS",
    "auto_batch_fitting",
    "budget_memory",
    "fit_batches",
    "fitted_peaks",
    "measure_peaks",
    "memory_key",
    "oom_part",
]

CONFIRMATIONS = 3
# The auto batch is chosen to fit 95% of the limit: training's later steps can take a little more
# than the confirming step did (the process's own growth on a CPU, where the meter reads the whole
# resident set; fragmentation in CUDA's caching allocator). At the predicted edge, a CPU trial beside
# other work went over its limit by 0.2%.
AUTO_HEADROOM = 0.05
MB = 2**20


def memory_key(key: str) -> str:
    """The key of a knob combination's peak model in the verdict store, beside its verdict's."""
    return f"{key}-memory"


def oom_part(config: TrialConfig) -> list[tuple[str, object]]:
    """What an out-of-memory verdict implicates: the knob combination at its batch size (and, for
    the sampler, every larger one: `hpo.study.avoid`)."""
    return [*config.knobs.as_dict().items(), ("batch_size", config.training.batch_size)]


def budget_memory(run: TrialRun) -> TrialOutcome | None:
    """Hold the trial to its memory limit: the outcome when its batch is predicted not to fit;
    with `batch_size: auto`, `run.config` becomes the config at the batch chosen. Returns the limit
    too (None: no limit), for training to enforce."""
    config = run.config
    limit = limit_bytes(run.device, config.memory_limit_gb)
    if limit is None or run.workload.trainer != "hpo":
        if config.batch_auto is not None:
            raise UserInputError(
                f"params.batch_size: auto fills a memory limit with hpo's own loop, got "
                f"{'trainer ' + run.workload.trainer if limit is not None else 'no limit on ' + run.device.type}; "
                f"set study.memory_limit_gb (and a workload hpo trains)"
            )
        return None
    run.attrs[RecordKey.MEMORY_LIMIT_MB] = limit / MB
    with run.phases("probe"):
        peaks = _peak_model(run)
        if config.batch_auto is not None:
            peaks = _choose_batch(run, peaks, limit, config.batch_auto)
    run.attrs[RecordKey.MEMORY_MODEL] = {
        "fixed_mb": peaks.fixed_bytes / MB,
        "per_sample_mb": peaks.per_sample_bytes / MB,
        "batches": [b for b, _ in peaks.points],
    }
    batch = run.config.training.batch_size
    predicted = peaks.predict(batch)
    run.attrs[RecordKey.PREDICTED_PEAK_MB] = predicted / MB
    if predicted <= limit:
        return None
    run.model = None
    fits = peaks.largest_fitting(limit, batch - 1)
    detail = f"predicted {_gb(predicted)} GB > limit {_gb(limit)} GB at batch {batch} " + (
        f"(fits up to {fits})" if fits else "(fits no batch)"
    )
    run.attrs[RecordKey.KNOBS_OBSERVED] = {}
    return ended(Verdict.make(Kind.OOM, detail, oom_part(run.config)), run.attrs)


def _gb(size: float) -> str:
    return f"{size / GB:.3g}"


def _peak_model(run: TrialRun) -> PeakModel:
    return fitted_peaks(run.verdicts, run.key, lambda: _model(run), run.workload, run.config)


def fitted_peaks(
    store: VerdictStore, key: str, model: Callable[[], AssembledModel], workload: Workload, config: TrialConfig
) -> PeakModel:
    """The peak model of the knob combination whose verdict is at `key`: read from `store`, or
    fitted to real steps on `model()` (called only then) at `fit_batches(config)` and kept there."""
    cached = store.get(memory_key(key))
    if cached is not None:
        return PeakModel.from_record(cached)
    peaks = fit_peaks(measure_peaks(model(), workload, config, fit_batches(config)))
    store.add(memory_key(key), peaks.record())
    return peaks


def auto_batch_fitting(peaks: PeakModel, limit: int, auto: AutoBatch, ceiling: int | None = None) -> int:
    """The largest batch up to `ceiling` (default `auto.max`), a multiple of `auto.multiple_of`,
    that `peaks` predicts fits within AUTO_HEADROOM of `limit`: what `batch_size: auto` tries first."""
    budget = int(limit * (1 - AUTO_HEADROOM))
    return peaks.largest_fitting(budget, auto.max if ceiling is None else ceiling, auto.multiple_of)


def _model(run: TrialRun) -> AssembledModel:
    """The probe's model, handed on; or, when the knobs' verdict was cached, the model the trial
    would build, built now and handed on to training."""
    if run.model is None:
        with run.phases("build"):
            seed_everything(run.config.seed)
            run.model = AssembledModel(run.workload, run.config.knobs, run.config.training, run.device)
    return run.model


def fit_batches(config: TrialConfig) -> tuple[int, int]:
    """The two batch sizes the peak model is fitted at: an eighth and a quarter of a fixed batch
    (half a batch's samples in all, with the unmeasured first step); 4 and 8 samples, rounded up
    to `multiple_of`, for `batch_size: auto`, whose choice a real step then confirms."""
    if config.batch_auto is not None:
        m = config.batch_auto.multiple_of
        small = -(-4 // m) * m
        return small, 2 * small
    batch = config.training.batch_size
    small = max(1, batch // 8)
    return small, max(small + 1, batch // 4)


def measure_peaks(
    model: AssembledModel, workload: Workload, config: TrialConfig, batches: tuple[int, ...], first: int | None = None
) -> list[tuple[int, int]]:
    """(batch, peak bytes) of one real step at each of `batches`, after an unmeasured first step at
    `first` (default: the first of them); the model restarted at its weights and buffers afterwards."""
    buffers = {name: buffer.clone() for name, buffer in model.model.named_buffers()}
    try:
        _step_peak(model, workload, config, first or batches[0])  # allocates the optimizer's state
        return [(b, _step_peak(model, workload, config, b)) for b in batches]
    finally:
        model.restart()
        with torch.no_grad():
            for name, buffer in model.model.named_buffers():
                buffer.copy_(buffers[name])


def _step_peak(model: AssembledModel, workload: Workload, config: TrialConfig, batch_size: int) -> int:
    batch = model.move(next(workload.train_batches(batch_size, config.seed)))
    hand_back_freed(model.device)
    model.memory = MemoryMeter(model.device)
    # On a CPU the whole step is sampled: its peak may be inside backward (checkpointing's recomputation).
    with ResidentPeak() if model.device.type != "cuda" else contextlib.nullcontext() as resident:
        model.forward_backward(batch)
        with torch.no_grad():
            for parameter in model.model.parameters():
                if parameter.grad is not None:
                    parameter.grad.nan_to_num_(0.0, 0.0, 0.0)  # so that the update at lr 0 moves no weight
        with learning_rate_zero(model.optimizer):
            model.optimizer_step()
    return max(int(model.memory.peak_mb * MB), resident.peak_bytes if resident else 0)


def _choose_batch(run: TrialRun, peaks: PeakModel, limit: int, auto: AutoBatch) -> PeakModel:
    """The largest batch the model says fits within AUTO_HEADROOM of the limit, confirmed by a real
    step; `run.config` trains at it. A confirming step over that (or out of memory) refits with what
    it measured."""
    ceiling, budget = auto.max, int(limit * (1 - AUTO_HEADROOM))
    chosen = 0
    for _ in range(CONFIRMATIONS):
        chosen = auto_batch_fitting(peaks, limit, auto, ceiling)
        if chosen == 0:
            break
        model = _model(run)
        try:
            (_, peak), *_ = measure_peaks(model, run.workload, run.config, (chosen,), first=fit_batches(run.config)[0])
        except (torch.OutOfMemoryError, RuntimeError) as exc:
            if not is_out_of_memory(exc):  # torch's CPU allocator's failure (under the cap) is a RuntimeError
                raise
            peak = None
        if peak is not None and peak <= budget:
            break
        if peak is not None:
            peaks = fit_peaks([*peaks.points, (chosen, peak)])
        ceiling, chosen = chosen - auto.multiple_of, 0
    batch = chosen or auto.multiple_of  # none fits: the smallest, which the prediction then rejects
    lr = scaled_lr(run.config.training.lr, batch, auto)
    training = dataclasses.replace(run.config.training, batch_size=batch, lr=lr)
    run.config = dataclasses.replace(run.config, training=training, batch_auto=None)
    if run.model is not None and lr != run.model.training.lr:
        run.model.training = training
        run.model.restart()  # an optimizer at the scaled rate
    run.attrs[RecordKey.CONFIG] = run.config.to_dict()
    run.attrs[RecordKey.BATCH_SIZE_CHOSEN] = batch
    run.attrs[RecordKey.LR_CHOSEN] = lr
    return peaks
