"""The trial's memory budget (`study.memory_limit_gb`): after the probe, before training.

Per knob combination a peak model (`hpo.hardware._memory_model`) is fitted to the peaks of real
steps on the trial's model, starting at the smallest batch and growing only while the fit predicts
the next size fits (`hpo.verify.peaks._peak_fit`), and kept in the study's verdict store beside the knobs'
verdict: a later trial of the same combination reads it, and steps only to grow it towards a larger
batch. Then:

- a fixed batch predicted not to fit is rejected before it trains (`oom: predicted ... > limit ...
  at batch B (fits up to N)`), implicating the knobs and the batch size, so that the sampler does
  not propose the combination at that batch, or above it, again (`hpo.study._avoid`);
- `batch_size: auto` trains at the largest batch the model says fits, confirmed by one real step
  at that size; a confirming step over the limit adds its peak to the fit and the next size is
  tried, `CONFIRMATIONS` times at most.

The model is restarted at its initial weights and buffers after the steps, as the probe hands it on.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import torch

from hpo.config.lr_scaling import scaled_lr
from hpo.config.params import AutoBatch
from hpo.config.trial import TrialConfig
from hpo.engine import AssembledModel
from hpo.errors import UserInputError
from hpo.hardware import GB, PeakModel, fit_peaks, is_out_of_memory, limit_bytes, seed_everything
from hpo.records import RecordKey
from hpo.trial._outcome import TrialOutcome, ended
from hpo.trial._run import TrialRun
from hpo.verdicts import Kind, Verdict
from hpo.verify import peaks as verify_peaks
from hpo.verify.peaks import AUTO_HEADROOM, fit_batches, measure_peaks, memory_key
from hpo.verify.stored import VerdictStore
from hpo.workloads.base import Workload

__all__ = [
    "AUTO_HEADROOM",
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
MB = 2**20


def oom_part(config: TrialConfig) -> list[tuple[str, object]]:
    """What an out-of-memory verdict implicates: the knob combination at its batch size (and, for
    the sampler, every larger one: `hpo.study._avoid`)."""
    return [*config.knobs.as_dict().items(), ("batch_size", config.training.batch_size)]


def budget_memory(run: TrialRun) -> TrialOutcome | None:
    """Hold the trial to its memory limit: the outcome when its batch is predicted not to fit;
    with `batch_size: auto`, `run.config` becomes the config at the batch chosen. Returns the limit
    too (None: no limit), for training to enforce."""
    config = run.config
    limit = limit_bytes(run.device, config.memory_limit_gb)
    if limit is None or run.workload.trainer != "hpo":
        _refuse_auto_batch(run, limit)
        return None
    run.attrs[RecordKey.MEMORY_LIMIT_MB] = limit / MB
    with run.phases("probe"):
        peaks = _peak_model(run, limit)
        if config.batch_auto is not None:
            peaks = _choose_batch(run, peaks, limit, config.batch_auto)
    run.attrs[RecordKey.MEMORY_MODEL] = {
        "fixed_mb": peaks.fixed_bytes / MB,
        "per_sample_mb": peaks.per_sample_bytes / MB,
        "batches": [b for b, _ in peaks.points],
    }
    return _predicted_oom(run, peaks, limit)


def _refuse_auto_batch(run: TrialRun, limit: int | None) -> None:
    """`batch_size: auto` needs a limit to fill and hpo's own loop to fill it."""
    if run.config.batch_auto is not None:
        raise UserInputError(
            f"params.batch_size: auto fills a memory limit with hpo's own loop, got "
            f"{'trainer ' + run.workload.trainer if limit is not None else 'no limit on ' + run.device.type}; "
            f"set study.memory_limit_gb (and a workload hpo trains)"
        )


def _predicted_oom(run: TrialRun, peaks: PeakModel, limit: int) -> TrialOutcome | None:
    """The trial's `oom` outcome when its batch is predicted over the limit, else None."""
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


def _peak_model(run: TrialRun, limit: int) -> PeakModel:
    return verify_peaks.fitted_peaks(run.verdicts, memory_key(run.key), lambda: _model(run), run.workload, run.config, limit)


def fitted_peaks(
    store: VerdictStore,
    key: str,
    model: Callable[[], AssembledModel],
    workload: Workload,
    config: TrialConfig,
    limit: int | None = None,
) -> PeakModel:
    """The peak model of the knob combination whose verdict is at `key` (`hpo.verify.peaks._peak_fit`),
    grown within `limit`; the study's limit on the built model's device when none is given."""
    if limit is None and config.memory_limit_gb is not None:
        limit = int(config.memory_limit_gb * GB)
    elif limit is None:  # the device's default: known once the model is built on it
        built = model()
        limit, model = limit_bytes(built.device, None), lambda: built
    return verify_peaks.fitted_peaks(store, memory_key(key), model, workload, config, limit)


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


def _choose_batch(run: TrialRun, peaks: PeakModel, limit: int, auto: AutoBatch) -> PeakModel:
    """The largest batch the model says fits within AUTO_HEADROOM of the limit, confirmed by a real
    step; `run.config` trains at it. A confirming step over that (or out of memory) refits with what
    it measured."""
    chosen, peaks = _confirmed_batch(run, peaks, limit, auto)
    _train_at(run, chosen or auto.multiple_of, auto)  # none fits: the smallest, which the prediction then rejects
    return peaks


def _confirmed_batch(run: TrialRun, peaks: PeakModel, limit: int, auto: AutoBatch) -> tuple[int, PeakModel]:
    """The largest batch predicted to fit that a real step confirms (0: none within CONFIRMATIONS
    tries), and the peak model refitted with what the tries over the budget measured."""
    ceiling, budget = auto.max, int(limit * (1 - AUTO_HEADROOM))
    chosen = 0
    for _ in range(CONFIRMATIONS):
        chosen = auto_batch_fitting(peaks, limit, auto, ceiling)
        if chosen == 0:
            break
        peak = _confirming_peak(run, chosen)
        if peak is not None and peak <= budget:
            break
        if peak is not None:
            peaks = fit_peaks([*peaks.points, (chosen, peak)])
        ceiling, chosen = chosen - auto.multiple_of, 0
    return chosen, peaks


def _confirming_peak(run: TrialRun, batch: int) -> int | None:
    """The peak of one real step at `batch`; None when it ran out of memory."""
    model = _model(run)
    try:
        (_, peak), *_ = measure_peaks(model, run.workload, run.config, (batch,), first=fit_batches(run.config)[0])
    except (torch.OutOfMemoryError, RuntimeError) as exc:
        if not is_out_of_memory(exc):  # torch's CPU allocator's failure (under the cap) is a RuntimeError
            raise
        return None
    return peak


def _train_at(run: TrialRun, batch: int, auto: AutoBatch) -> None:
    """`run.config` and the model at the batch chosen, with the learning rate scaled to it."""
    lr = scaled_lr(run.config.training.lr, batch, auto)
    training = dataclasses.replace(run.config.training, batch_size=batch, lr=lr)
    run.config = dataclasses.replace(run.config, training=training, batch_auto=None)
    if run.model is not None and lr != run.model.training.lr:
        run.model.training = training
        run.model.restart()  # an optimizer at the scaled rate
    run.attrs[RecordKey.CONFIG] = run.config.to_dict()
    run.attrs[RecordKey.BATCH_SIZE_CHOSEN] = batch
    run.attrs[RecordKey.LR_CHOSEN] = lr
