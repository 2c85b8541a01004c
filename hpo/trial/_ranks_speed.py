"""The speed record of a trial of N ranks: model FLOPs, TFLOP/s over all ranks, and MFU against
N times one rank's device's peak.

The FLOPs are counted here, in the launcher, on the workload's own model (`hpo.engine._flops`):
they do not depend on how many ranks share the batch. A rank on a CPU computes on one thread
(`hpo.parallel.group.quiet_threads`), so its device's peak is this CPU's measured at one thread."""

from __future__ import annotations

import contextlib
import math

from hpo.config.trial import TrialConfig
from hpo.engine import model_flops_per_sample
from hpo.hardware import torch_threads, utilization
from hpo.hardware.probes import device_model
from hpo.parallel.group import rank_device
from hpo.records import RecordKey
from hpo.trial._speed_record import FLOP_COUNT_SAMPLES
from hpo.workloads.catalog import create_workload

__all__ = ["ranks_speed_attrs"]

RANK_THREADS = 1


def ranks_speed_attrs(config: TrialConfig, samples_per_s: float | None) -> dict:
    """FLOPs per sample, achieved TFLOP/s at `samples_per_s` (over all ranks) and MFU with its peak."""
    ranks = config.parallel.processes
    flops = _flops_per_sample(config)
    achieved = None if samples_per_s is None else flops * samples_per_s / 1e12
    device = rank_device(config.device, 0)
    # One rank's share of the work over one device's peak is the whole over N devices' peak.
    per_rank = math.nan if achieved is None else achieved / ranks
    threads = torch_threads(RANK_THREADS) if device.type == "cpu" else contextlib.nullcontext()
    with threads:
        mfu, peak = utilization(per_rank, device, config.knobs.precision, device_model(device))
    on = f" at {RANK_THREADS} thread each" if device.type == "cpu" else ""
    return {
        RecordKey.MODEL_FLOPS_PER_SAMPLE: flops,
        RecordKey.ACHIEVED_TFLOPS: achieved,
        RecordKey.MFU: mfu,
        RecordKey.PEAK_TFLOPS: None if peak is None else ranks * peak.tflops,
        RecordKey.PEAK_SOURCE: None if peak is None else f"{ranks} ranks x ({peak.source}){on}",
    }


def _flops_per_sample(config: TrialConfig) -> float:
    workload = create_workload(config.workload, config.workload_options)
    workload.bind_training(config.training.params())
    batch = next(workload.train_batches(min(FLOP_COUNT_SAMPLES, config.training.batch_size), config.seed))
    return model_flops_per_sample(workload, batch)
