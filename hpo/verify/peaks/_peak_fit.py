"""Fitting a knob combination's peak model to real steps, without a step the fit has not predicted
to fit (`docs/memory.md`).

The fit starts at the smallest batch (`multiple_of` samples, 1 for a fixed batch) and twice it,
then doubles the batch while the fit so far predicts the next size fits within AUTO_HEADROOM of
the limit, up to a quarter of the batch it is for (`FIT_SHARE`). A fit at batches 1 and 2 alone,
stretched to 2048, predicted 77.6 GB where about 23 GB was measured (a d256 x 4 GPT at seq 256 on
a CPU): the larger the batches fitted, the shorter the stretch. A fit kept in the verdict store
is grown the same way when a later trial's batch needs more of it.

Here, below the trial, because the probe needs it too: it fits the fp32/eager reference before
timing it at the trial's batch (`hpo.verify.probing`). The trial's budget uses it after the probe
(`hpo.trial.memory_budget`).

The measured steps run forward, backward and an update at learning rate 0 (the first, unmeasured,
allocates the optimizer's state, which every training step after the first holds); the model is
then restarted at its initial weights and buffers.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator

import torch

from hpo.config.trial import TrialConfig
from hpo.engine import AssembledModel
from hpo.hardware import MemoryMeter, PeakModel, ResidentPeak, fit_peaks, hand_back_freed, is_out_of_memory
from hpo.knobs.adamw_builders import learning_rate_zero
from hpo.verify.stored import VerdictStore
from hpo.workloads.base import Workload

__all__ = ["AUTO_HEADROOM", "FIT_SHARE", "fit_batches", "fit_ceiling", "fitted_peaks", "measure_peaks", "memory_key"]

# The auto batch is chosen to fit 95% of the limit: training's later steps can take a little more
# than the confirming step did (the process's own growth on a CPU, where the meter reads the whole
# resident set; fragmentation in CUDA's caching allocator). At the predicted edge, a CPU trial beside
# other work went over its limit by 0.2%. The fit grows within the same budget.
AUTO_HEADROOM = 0.05
# The fit grows up to this share of the batch it predicts: a prediction stretched 4x, for about half
# a batch's samples in all (1 + 2 + 4 + ... up to a quarter).
FIT_SHARE = 4


def memory_key(key: str) -> str:
    """The key of a knob combination's peak model in the verdict store, beside its verdict's."""
    return f"{key}-memory"


def fit_batches(config: TrialConfig) -> tuple[int, int]:
    """The two batch sizes every fit starts at: `multiple_of` samples (`batch_size: auto`) or 1,
    and twice that. Nothing has predicted any size yet: these are the smallest the fit can take."""
    small = config.batch_auto.multiple_of if config.batch_auto is not None else 1
    return small, 2 * small


def fit_ceiling(config: TrialConfig) -> int:
    """The largest batch the fit grows to: FIT_SHARE-th of the batch (of `auto`'s max)."""
    target = config.batch_auto.max if config.batch_auto is not None else config.training.batch_size
    return target // FIT_SHARE


def fitted_peaks(
    store: VerdictStore,
    store_key: str,
    model: Callable[[], AssembledModel],
    workload: Workload,
    config: TrialConfig,
    limit: int | None,
) -> PeakModel:
    """The peak model kept at `store_key` (`memory_key` of a combination's verdict key): read from `store`, grown (on
    `model()`, called only then) while it predicts its next size fits `limit` and stays within
    `fit_ceiling(config)`, and kept there. Without a limit the fit does not grow."""
    cached = store.get(store_key)
    if cached is not None:
        peaks = PeakModel.from_record(cached)
        if _next_batch(peaks, config, limit) is None:
            return peaks
        points = list(peaks.points)
    else:
        points = []
    grown = fit_peaks(_grown_points(model(), workload, config, limit, points))
    store.put(store_key, grown.record())
    return grown


def _next_batch(peaks: PeakModel, config: TrialConfig, limit: int | None) -> int | None:
    """The next batch the fit may step at: twice its largest, if within the ceiling and predicted
    to fit within AUTO_HEADROOM of `limit`; None when it stops here."""
    if limit is None:
        return None
    following = 2 * max(b for b, _ in peaks.points)
    if following > fit_ceiling(config) or peaks.predict(following) > limit * (1 - AUTO_HEADROOM):
        return None
    return following


def _grown_points(
    model: AssembledModel, workload: Workload, config: TrialConfig, limit: int | None, points: list[tuple[int, int]]
) -> list[tuple[int, int]]:
    """The points to fit: `points` (none: the two starting sizes measured first) and one more per
    size the fit then predicts fits, after which the two largest are measured again and are the
    points (`_two_largest`). A grown step that runs out of memory, predicted to fit, ends the growth
    with what was measured: the fit stays on the sizes that ran."""
    with _stepping(model, workload, config, fit_batches(config)[0]) as step:
        stepped = not points
        if stepped:
            points = [(b, step(b)) for b in fit_batches(config)]
        while (following := _next_batch(fit_peaks(points), config, limit)) is not None:
            try:
                points.append((following, step(following)))
            except (torch.OutOfMemoryError, RuntimeError) as exc:
                if not is_out_of_memory(exc):  # torch's CPU allocator's failure (under the cap) is a RuntimeError
                    raise
                break
            stepped = True
        if stepped:
            points = [(b, step(b)) for b in _two_largest(points)]
    return points


def _two_largest(points: list[tuple[int, int]]) -> tuple[int, int]:
    """The two largest batches fitted, measured again: the fit's own slope. On a CPU every new batch
    size leaves memory behind (bf16's oneDNN kernels are cached per shape: a bf16 causal_lm with
    checkpointing read 346, 357, 364, 374, 384, 394 MB at 1 to 32 samples and 405 MB at 1 sample
    again), which a fit over every size read as per-sample memory (+25% at 128 samples). Measured
    again, both hold what every size left, as training does after the fit, and differ by the
    samples alone."""
    second, largest = sorted({b for b, _ in points})[-2:]
    return second, largest


def measure_peaks(
    model: AssembledModel, workload: Workload, config: TrialConfig, batches: tuple[int, ...], first: int | None = None
) -> list[tuple[int, int]]:
    """(batch, peak bytes) of one real step at each of `batches`, after an unmeasured first step at
    `first` (default: the first of them); the model restarted at its weights and buffers afterwards."""
    with _stepping(model, workload, config, first or batches[0]) as step:
        return [(b, step(b)) for b in batches]


@contextlib.contextmanager
def _stepping(model: AssembledModel, workload: Workload, config: TrialConfig, first: int) -> Iterator[Callable[[int], int]]:
    """A step's peak by batch size, after an unmeasured step at `first` (it allocates the optimizer's
    state); the model restarted at its weights and buffers on the way out."""
    buffers = {name: buffer.clone() for name, buffer in model.model.named_buffers()}
    try:
        _step_peak(model, workload, config, first)
        yield lambda batch: _step_peak(model, workload, config, batch)
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


MB = 2**20
