"""What memory allows each combination `hpo probe` verified, when a limit applies (`study.memory_limit_gb`,
or CUDA's default): its predicted peak at the study's batch and the largest batch that fits.

The peak model is the one a trial fits (`hpo.trial.fitted_peaks`), on a model built
for it after the probe; it is kept in the verdict store, so the study's trials of the combination,
and a later `hpo probe`, read it instead of fitting it again. Without a limit nothing runs.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from hpo.config.params import AutoBatch, Choices, Fixed, IntRange
from hpo.config.space import SearchSpace
from hpo.config.trial import TrialConfig
from hpo.engine import AssembledModel
from hpo.hardware import is_out_of_memory, limit_bytes, seed_everything
from hpo.logging import get_logger
from hpo.trial import fitted_peaks
from hpo.verify.peaks import auto_batch_fitting
from hpo.verify.stored import VerdictStore
from hpo.workloads.base import Workload

__all__ = ["MemoryFit", "batch_ceiling", "memory_fit"]

_log = get_logger(__name__)
MB = 2**20


@dataclass(frozen=True)
class MemoryFit:
    predicted_peak_mb: float  # at the batch a trial of the study would train at
    largest_batch: int  # 0: not even the smallest batch fits


def batch_ceiling(space: SearchSpace, config: TrialConfig) -> int:
    """The largest batch a trial of the space can train at: `batch_size: auto`'s `max`, the top of
    a range or list, or the fixed batch."""
    spec = space.params.get("batch_size")
    if isinstance(spec, AutoBatch):
        return spec.max
    if isinstance(spec, IntRange):
        return spec.high
    if isinstance(spec, Choices):
        return max(spec.choices)
    if isinstance(spec, Fixed):
        return spec.value
    return config.training.batch_size


def memory_fit(
    workload: Workload, config: TrialConfig, device: torch.device, store: VerdictStore, key: str, ceiling: int
) -> MemoryFit | None:
    """The combination's predicted peak and largest fitting batch (up to `ceiling`); None when no
    limit applies, or a measured step ran out of memory (said in a warning)."""
    limit = limit_bytes(device, config.memory_limit_gb)
    if limit is None or workload.trainer != "hpo":  # trials hold to no limit either
        return None
    try:
        # The limit handed on: without it the fit builds a model only to learn the device's default.
        peaks = fitted_peaks(store, key, lambda: _built(workload, config, device), workload, config, limit)
    except Exception as exc:
        if not is_out_of_memory(exc):  # on a CPU under the cap, the allocator's RuntimeError
            raise
        _log.warning(f"hpo probe: {config.knobs.as_dict()}: the peak model's steps ran out of memory ({exc})")
        return None
    if config.batch_auto is not None:  # the batch a trial chooses before its confirming step
        largest = auto_batch_fitting(peaks, limit, config.batch_auto)
        batch = largest or config.batch_auto.multiple_of
    else:
        largest, batch = peaks.largest_fitting(limit, ceiling), config.training.batch_size
    return MemoryFit(peaks.predict(batch) / MB, largest)


def _built(workload: Workload, config: TrialConfig, device: torch.device) -> AssembledModel:
    seed_everything(config.seed)
    return AssembledModel(workload, config.knobs, config.training, device)
