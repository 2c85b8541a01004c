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

from collections.abc import Callable

from hpo.config.params import AutoBatch
from hpo.config.trial import TrialConfig
from hpo.engine import AssembledModel
from hpo.errors import UserInputError
from hpo.hardware import GB, PeakModel, limit_bytes, seed_everything
from hpo.records import RecordKey
from hpo.trial._outcome import TrialOutcome, ended
from hpo.trial._run import TrialRun
from hpo.verdicts import Kind, Verdict
from hpo.verify import peaks as verify_peaks
from hpo.verify.peaks import (
    AUTO_HEADROOM,
    CONFIRMATIONS,
    at_batch,
    auto_batch_fitting,
    confirmed_batch,
    confirming_peak,
    fit_batches,
    measure_peaks,
    memory_key,
    memory_model_record,
    oom_part,
    predicted_over,
)
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
    "refuse_auto_batch",
]

MB = 2**20


def budget_memory(run: TrialRun) -> TrialOutcome | None:
    """Hold the trial to its memory limit: the outcome when its batch is predicted not to fit;
    with `batch_size: auto`, `run.config` becomes the config at the batch chosen. Returns the limit
    too (None: no limit), for training to enforce."""
    config = run.config
    limit = limit_bytes(run.device, config.memory_limit_gb)
    if limit is None or run.workload.trainer != "hpo":
        refuse_auto_batch(config, run.workload.trainer, run.device.type, limit)
        return None
    run.attrs[RecordKey.MEMORY_LIMIT_MB] = limit / MB
    with run.phases("probe"):
        peaks = _peak_model(run, limit)
        if config.batch_auto is not None:
            peaks = _choose_batch(run, peaks, limit, config.batch_auto)
    run.attrs[RecordKey.MEMORY_MODEL] = memory_model_record(peaks)
    return _predicted_oom(run, peaks, limit)


def refuse_auto_batch(config: TrialConfig, trainer: str, device_type: str, limit: int | None) -> None:
    """`batch_size: auto` needs a limit to fill and hpo's own loop to fill it."""
    if config.batch_auto is not None:
        raise UserInputError(
            f"params.batch_size: auto fills a memory limit with hpo's own loop, got "
            f"{'trainer ' + trainer if limit is not None else 'no limit on ' + device_type}; "
            f"set study.memory_limit_gb (and a workload hpo trains)"
        )


def _predicted_oom(run: TrialRun, peaks: PeakModel, limit: int) -> TrialOutcome | None:
    """The trial's `oom` outcome when its batch is predicted over the limit, else None."""
    batch = run.config.training.batch_size
    run.attrs[RecordKey.PREDICTED_PEAK_MB] = peaks.predict(batch) / MB
    detail = predicted_over(peaks, limit, batch)
    if detail is None:
        return None
    run.model = None
    run.attrs[RecordKey.KNOBS_OBSERVED] = {}
    return ended(Verdict.make(Kind.OOM, detail, oom_part(run.config)), run.attrs)


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
    step (`confirmed_batch`); `run.config` trains at it. A confirming step over that (or out of
    memory) refits with what it measured."""
    chosen, peaks = confirmed_batch(
        peaks, limit, auto, lambda batch: confirming_peak(_model(run), run.workload, run.config, batch)
    )
    _train_at(run, chosen or auto.multiple_of)  # none fits: the smallest, which the prediction then rejects
    return peaks


def _train_at(run: TrialRun, batch: int) -> None:
    """`run.config` and the model at the batch chosen, with the learning rate scaled to it."""
    run.config = at_batch(run.config, batch)
    training = run.config.training
    if run.model is not None and training.lr != run.model.training.lr:
        run.model.training = training
        run.model.restart()  # an optimizer at the scaled rate
    run.attrs[RecordKey.CONFIG] = run.config.to_dict()
    run.attrs[RecordKey.BATCH_SIZE_CHOSEN] = batch
    run.attrs[RecordKey.LR_CHOSEN] = training.lr
