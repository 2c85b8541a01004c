"""What a trial's knobs bought: the systems metrics it records beside the workload's, which a study
may also optimize (`hpo.config.objectives`).

MFU is achieved model FLOPs (at the steady steps' speed) over the device's peak for the trial's precision. Model FLOPs per sample
are counted once per model shape (on a real eager-attention step, see `hpo.engine._flops`) and kept
in the verdict store, so a study counts them once. The peak is the published one for a known GPU,
or this CPU's measured one (`hpo.hardware._peaks`); its source is recorded. Without a peak (an
unknown GPU) a trial records no MFU rather than a guess; MFU never exceeds 1 (`peaks.utilization`).

An objective a trial trained normally but could not produce is a result with the worst value, never
a success and never an error (docs/objectives.md): `time_to_target_s` of a target never reached
(`target_reached: false`), `mfu` with no known peak, a speed metric with no steady step to time. A
workload metric that `evaluate()` did not return is a bug in the workload: an error.
"""

from __future__ import annotations

import math

import torch

from hpo.config.objectives import SYSTEM_METRICS, worst_value
from hpo.config.trial import TrialConfig
from hpo.engine import model_flops_per_sample
from hpo.hardware import utilization
from hpo.hardware.probes import device_model
from hpo.records import RecordKey
from hpo.trial._trainer import TrainResult
from hpo.verify.stored import VerdictStore, flops_key
from hpo.workloads.base import Workload

__all__ = ["MetricNotReturned", "objective_values", "speed_attrs", "workload_metric"]

# The count runs on this many samples: every sample of a batch has the same shape, so matmul FLOPs
# per sample do not depend on how many there are, and a small batch counts them in a fraction of a step.
FLOP_COUNT_SAMPLES = 2


def _flops_per_sample(workload: Workload, config: TrialConfig, device: torch.device, store: VerdictStore) -> float:
    key = flops_key(config, device)
    cached = store.get(key)  # the probe's reference step has usually counted them
    if cached is None:
        batch = next(workload.train_batches(min(FLOP_COUNT_SAMPLES, config.training.batch_size), config.seed))
        cached = {"model_flops_per_sample": model_flops_per_sample(workload, batch)}
        store.put(key, cached)
    return cached["model_flops_per_sample"]


def speed_attrs(workload: Workload, config: TrialConfig, device: torch.device, result: TrainResult, store: VerdictStore) -> dict:
    """steps_run, train_s, the target's outcome, FLOPs, achieved TFLOP/s and MFU with its peak."""
    attrs: dict = {RecordKey.STEPS_RUN: result.steps, RecordKey.TRAIN_S: result.train_s}
    if config.training.target is not None:
        attrs[RecordKey.TIME_TO_TARGET_S] = result.time_to_target_s
        attrs[RecordKey.TARGET_REACHED] = result.time_to_target_s is not None
    flops = _flops_per_sample(workload, config, device, store)
    # At the steady steps' speed: MFU says how well the knobs use the device while it computes; the
    # waits for batches are the loader's, recorded as data_wait_share and in train_samples_per_s.
    steady = result.steady_samples_per_s
    achieved = None if steady is None else flops * steady / 1e12
    mfu, peak = utilization(math.nan if achieved is None else achieved, device, config.knobs.precision, device_model(device))
    attrs.update({RecordKey.MODEL_FLOPS_PER_SAMPLE: flops, RecordKey.ACHIEVED_TFLOPS: achieved})
    attrs.update(
        {
            RecordKey.MFU: mfu,
            RecordKey.PEAK_TFLOPS: None if peak is None else peak.tflops,
            RecordKey.PEAK_SOURCE: None if peak is None else peak.source,
        }
    )
    return attrs


class MetricNotReturned(LookupError):
    """The workload's `evaluate()` did not return a metric the study optimizes."""


def workload_metric(name: str, metrics: dict[str, float]) -> float:
    """The value of the objective `name` among an evaluation's `metrics`, which must hold it."""
    if name not in metrics:
        raise MetricNotReturned(
            f"study.objectives names {name!r}, but the workload's evaluate() returned {sorted(metrics)}; "
            f"return {name!r} from evaluate() or optimize one of those"
        )
    return metrics[name]


def objective_values(config: TrialConfig, result: TrainResult, attrs: dict) -> list[float]:
    """One value per study objective: a workload metric, or a systems metric from `attrs`. A systems
    metric the trial could not produce (a target never reached, an MFU with no known peak, a speed
    with no steady step) is the worst value, never a success."""
    values = []
    for name, direction in zip(config.objectives, config.directions, strict=True):
        value = attrs.get(name) if name in SYSTEM_METRICS else workload_metric(name, result.metrics)
        values.append(float(value) if value is not None and math.isfinite(value) else worst_value(direction))
    return values
