"""The peak model and `batch_size: auto` on every rank, before the strategy wraps its model.

Each rank fits the one-process trial's peak model (`hpo.verify.peaks`) to real steps of its own
model on its own device, for its own batch (the global batch over the ranks), under the limit its
process is held to (`hpo.parallel.rank_memory`): from the smallest batch up, each size stepped only
once the fit predicts it fits. The ranks then gather what each predicted; a rank whose batch is
predicted over the limit ends every rank with the same `oom: rank R: predicted ...`, implicating the
knobs at the global batch, before any training step.

With `batch_size: auto`, `max` and `multiple_of` bound the global batch, which is also a multiple
of the ranks: a rank's batch is a multiple of lcm(multiple_of, processes) / processes, up to
max / processes. Each rank takes the largest its fit allows, the ranks agree on the smallest, and
each confirms it by one real step; a confirming step over the budget on any rank refits that rank
and the ranks try the next size down together (`hpo.verify.peaks.confirmed_batch`). The global
batch is the agreed one times the ranks, and the learning rate is scaled to it.

The fit is the unwrapped model's, as the probe's step is: what DDP's buckets or FSDP2's gathers
add shows as the difference between `predicted_peak_mb_per_rank` and `peak_memory_mb_per_rank`.
A rank's fit is not kept in the study's verdict store (a rank has none): every trial fits again.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
from collections.abc import Iterator

import torch

from hpo.config.trial import TrialConfig
from hpo.engine import AssembledModel
from hpo.hardware import PeakModel, limit_bytes
from hpo.parallel.agreement import AgreedVerdict, gathered
from hpo.verdicts import Kind, Verdict
from hpo.verify.peaks import (
    Agreement,
    at_batch,
    confirmed_batch,
    confirming_peak,
    fitted_peaks,
    memory_model_record,
    oom_part,
    predicted_over,
)
from hpo.verify.stored import MemoryVerdicts

__all__ = ["budget_on_rank", "carried", "per_rank_config"]

MB = 2**20


def per_rank_config(config: TrialConfig, world: int) -> TrialConfig:
    """`config` as one rank's share: its batch the global batch over `world`; `batch_size: auto`'s
    `max` and `multiple_of`, which bound the global batch, as a rank's bounds."""
    training = dataclasses.replace(config.training, batch_size=config.training.batch_size // world)
    auto = config.batch_auto
    if auto is not None:
        step = math.lcm(auto.multiple_of, world) // world
        auto = dataclasses.replace(auto, max=auto.max // world // step * step, multiple_of=step)
    return dataclasses.replace(config, training=training, batch_auto=auto)


def budget_on_rank(assembled: AssembledModel, config: TrialConfig, rank: int, world: int) -> tuple[TrialConfig, dict]:
    """The config the ranks train (at the global batch `batch_size: auto` agreed on) and this rank's
    memory record; with no limit, `config` as it is and no record. Raises AgreedVerdict `oom` on
    every rank when any rank's batch is predicted over the limit."""
    limit = limit_bytes(assembled.device, config.memory_limit_gb)
    if limit is None:
        return config, {}
    own = per_rank_config(config, world)
    devices = [assembled.device] if assembled.device.type == "cuda" else []
    with torch.random.fork_rng(devices=devices):  # the fit's steps leave training's random stream as it was
        peaks = fitted_peaks(MemoryVerdicts(), "rank", lambda: assembled, assembled.workload, own, limit)
        own, peaks, confirmed = _chosen(assembled, own, peaks, limit, world)
    trained = config if config.batch_auto is None else at_batch(config, own.training.batch_size * world)
    record = _record(peaks, own.training.batch_size, limit, confirmed)
    _agree_fits(record, trained, world)
    if trained is not config:
        assembled.training = trained.training
        assembled.restart()  # an optimizer at the rate scaled to the batch
    return trained, record


def _chosen(
    assembled: AssembledModel, own: TrialConfig, peaks: PeakModel, limit: int, world: int
) -> tuple[TrialConfig, PeakModel, dict]:
    """This rank's config at the batch the ranks agreed on (none to choose: `own`), the peak model
    refitted by the confirming steps, and what each confirming step measured, by batch."""
    if own.batch_auto is None:
        return own, peaks, {}
    confirmed: dict[int, int | None] = {}

    def confirm(batch: int) -> int | None:
        confirmed[batch] = confirming_peak(assembled, assembled.workload, own, batch)
        return confirmed[batch]

    chosen, peaks = confirmed_batch(peaks, limit, own.batch_auto, confirm, _group(world))
    # None fits on some rank: the smallest, which that rank's prediction then rejects.
    batch = chosen or own.batch_auto.multiple_of
    return dataclasses.replace(own, training=dataclasses.replace(own.training, batch_size=batch)), peaks, confirmed


def _group(world: int) -> Agreement:
    """The ranks agree on the smallest batch any of them allows, and on a fact every one saw."""
    return Agreement(smallest=lambda batch: min(gathered(batch, world)), every=lambda holds: all(gathered(holds, world)))


def _record(peaks: PeakModel, batch: int, limit: int, confirmed: dict) -> dict:
    """This rank's memory, as a one-process trial records its own (`memory_model`, `predicted_peak_mb`
    at its batch), with why its batch does not fit (`over`, None when it fits)."""
    return {
        "memory_limit_mb": limit / MB,
        "batch_per_rank": batch,
        "predicted_peak_mb": peaks.predict(batch) / MB,
        "memory_model": memory_model_record(peaks),
        "confirmed_peak_mb": {str(b): None if p is None else p / MB for b, p in confirmed.items()},
        "over": predicted_over(peaks, limit, batch),
    }


def _agree_fits(record: dict, trained: TrialConfig, world: int) -> None:
    """Every rank's record gathered; AgreedVerdict `oom` on every rank, naming the first rank whose
    batch is predicted over the limit, implicating the knobs at the global batch."""
    every = gathered(record, world)
    for rank, seen in enumerate(every):
        if seen["over"] is not None:
            detail = f"rank {rank}: {seen['over']}, a rank's share of global batch {trained.training.batch_size}"
            raise AgreedVerdict(Verdict.make(Kind.OOM, detail, oom_part(trained)), {"memory_per_rank": every})


@contextlib.contextmanager
def carried(memory: dict) -> Iterator[None]:
    """Inside, an exception leaves with this rank's memory record on it (`rank_memory`), which the
    rank writes to the launcher with its error (`hpo.parallel.faults.describe_error`): a trial of
    ranks that fails in training still records what each rank predicted."""
    try:
        yield
    except BaseException as exc:
        if memory:
            exc.rank_memory = memory
        raise
