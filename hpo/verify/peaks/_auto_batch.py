"""What a fitted peak model decides before training, shared by a one-process trial
(`hpo.trial._memory_limit`) and by each rank of a trial of ranks (`hpo.parallel.rank_budget`):
whether a batch is predicted over the limit, and which batch `batch_size: auto` trains at.

`batch_size: auto` takes the largest batch predicted to fit within AUTO_HEADROOM of the limit and
confirms it by one real step; a confirming step over that (or out of memory) refits with what it
measured and the next size down is tried, `CONFIRMATIONS` times at most. Under ranks every choice
is agreed over the group (`Agreement`): each confirms the same batch, and they stop together."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass

import torch

from hpo.config.lr_scaling import scaled_lr
from hpo.config.params import AutoBatch
from hpo.config.trial import TrialConfig
from hpo.engine import AssembledModel
from hpo.hardware import GB, PeakModel, fit_peaks, is_out_of_memory
from hpo.verify.peaks._peak_fit import AUTO_HEADROOM, fit_batches, measure_peaks
from hpo.workloads.base import Workload

__all__ = [
    "ALONE",
    "CONFIRMATIONS",
    "Agreement",
    "at_batch",
    "auto_batch_fitting",
    "confirmed_batch",
    "confirming_peak",
    "memory_model_record",
    "oom_part",
    "predicted_over",
]

CONFIRMATIONS = 3
MB = 2**20


@dataclass(frozen=True)
class Agreement:
    """How the processes of one trial agree: on the smallest of their batches, and on whether every
    one of them saw a fact hold. One process agrees with itself (`ALONE`)."""

    smallest: Callable[[int], int]
    every: Callable[[bool], bool]


ALONE = Agreement(smallest=lambda batch: batch, every=lambda holds: holds)


def oom_part(config: TrialConfig) -> list[tuple[str, object]]:
    """What an out-of-memory verdict implicates: the knob combination at its batch size (and, for
    the sampler, every larger one: `hpo.study._avoid`)."""
    return [*config.knobs.as_dict().items(), ("batch_size", config.training.batch_size)]


def predicted_over(peaks: PeakModel, limit: int, batch: int) -> str | None:
    """Why `batch` is not to train (`predicted P GB > limit L GB at batch B (fits up to N)`), or
    None when `peaks` predicts it fits `limit`."""
    predicted = peaks.predict(batch)
    if predicted <= limit:
        return None
    fits = peaks.largest_fitting(limit, batch - 1)
    return f"predicted {_gb(predicted)} GB > limit {_gb(limit)} GB at batch {batch} " + (
        f"(fits up to {fits})" if fits else "(fits no batch)"
    )


def memory_model_record(peaks: PeakModel) -> dict:
    """The peak model as a trial records it (`memory_model`), in MB."""
    return {
        "fixed_mb": peaks.fixed_bytes / MB,
        "per_sample_mb": peaks.per_sample_bytes / MB,
        "batches": [b for b, _ in peaks.points],
    }


def _gb(size: float) -> str:
    return f"{size / GB:.3g}"


def auto_batch_fitting(peaks: PeakModel, limit: int, auto: AutoBatch, ceiling: int | None = None) -> int:
    """The largest batch up to `ceiling` (default `auto.max`), a multiple of `auto.multiple_of`,
    that `peaks` predicts fits within AUTO_HEADROOM of `limit`: what `batch_size: auto` tries first."""
    budget = int(limit * (1 - AUTO_HEADROOM))
    return peaks.largest_fitting(budget, auto.max if ceiling is None else ceiling, auto.multiple_of)


def confirmed_batch(
    peaks: PeakModel, limit: int, auto: AutoBatch, confirm: Callable[[int], int | None], agree: Agreement = ALONE
) -> tuple[int, PeakModel]:
    """The largest batch predicted to fit (the smallest of the group's) that a real step, `confirm`,
    confirms on every process (0: none within CONFIRMATIONS tries), and the peak model refitted
    with what this process's tries over the budget measured."""
    ceiling, budget = auto.max, int(limit * (1 - AUTO_HEADROOM))
    for _ in range(CONFIRMATIONS):
        chosen = agree.smallest(auto_batch_fitting(peaks, limit, auto, ceiling))
        if chosen == 0:
            return 0, peaks
        peak = confirm(chosen)
        if agree.every(peak is not None and peak <= budget):
            return chosen, peaks
        if peak is not None and peak > budget:
            peaks = fit_peaks([*peaks.points, (chosen, peak)])
        ceiling = chosen - auto.multiple_of
    return 0, peaks


def confirming_peak(model: AssembledModel, workload: Workload, config: TrialConfig, batch: int) -> int | None:
    """The peak of one real step at `batch`; None when it ran out of memory."""
    try:
        (_, peak), *_ = measure_peaks(model, workload, config, (batch,), first=fit_batches(config)[0])
    except (torch.OutOfMemoryError, RuntimeError, MemoryError) as exc:
        if not is_out_of_memory(exc):  # torch's CPU allocator's failure (under the cap) is a RuntimeError
            raise
        return None
    return peak


def at_batch(config: TrialConfig, batch: int) -> TrialConfig:
    """`config` at the batch `batch_size: auto` chose, with the learning rate scaled to it
    (`params.lr_scaling`) and nothing left to choose."""
    lr = scaled_lr(config.training.lr, batch, config.batch_auto)
    training = dataclasses.replace(config.training, batch_size=batch, lr=lr)
    return dataclasses.replace(config, training=training, batch_auto=None)
