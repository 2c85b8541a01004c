"""Each zoo model against each knob value, one value at a time, through hpo's pre-trial probe
(`hpo.verify.probing._probe.run_probe`, as `hpo probe` runs it): the value's verdict on that model against
the fp32/eager/for-loop reference, with the probe's errors and what the probe cost.

    for row in probe_model(ZOO["llama"], knob_values(), torch.device("cpu")):
        print(row.value, row.verdict, row.loss_rel_err)
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import torch

from examples.zoo.models import ZooModel
from hpo.config.trial import Knobs, TrainingConfig, TrialConfig
from hpo.hardware import trial_runtime
from hpo.knobs.systems import TRIAL_KNOBS
from hpo.verify.fault import REFERENCE_KNOBS
from hpo.verify.machine import CHECKED_KNOBS, value_capability
from hpo.verify.probing import ReferenceMemory, run_probe
from hpo.verify.stored import MemoryVerdicts
from hpo.workloads.catalog import create_workload

__all__ = [
    "BATCH_SIZE",
    "GPU_ATTENTION_PRECISION",
    "ProbeRow",
    "knob_values",
    "probe_model",
    "row_knobs",
    "runnable_here",
    "trial_config",
]

BATCH_SIZE = 16
KnobValue = tuple[str, object]  # ("precision", "bf16"), ("grad_checkpointing", True)


@dataclass
class ProbeRow:
    model: str
    knob: str
    value: object
    verdict: str
    blame: str | None
    loss_rel_err: float | None
    grad_rel_err: float | None
    # What rounding alone gives on this model under the value's precision, and the bounds the
    # errors were judged against (`hpo.verify.probing._bounds`); None where no numbers were compared.
    loss_floor: float | None
    grad_floor: float | None
    loss_bound: float | None
    grad_bound: float | None
    probe_s: float  # the probe's own time, building the models included
    observed: dict
    precision: str = REFERENCE_KNOBS.precision  # what the row ran at (`row_knobs`: bf16 for attention on CUDA)

    @property
    def ok(self) -> bool:
        return self.verdict == "ok"


def knob_values(compile_modes: Sequence[str] = ("default",)) -> list[KnobValue]:
    """Every value of every trial knob other than the reference's, from hpo's knob modules; of
    compile's modes, only `compile_modes` (each costs a compilation)."""
    reference = REFERENCE_KNOBS.as_dict()
    values: list[KnobValue] = []
    for name, knob in TRIAL_KNOBS.items():
        candidates = [False, *compile_modes] if name == "compile" else knob.values
        values += [(name, value) for value in candidates if value != reference[name]]
    return values


# On a GPU, SDPA's flash and cuDNN kernels exist only in half precision: probed at fp32 (the
# reference's) they are only ever refused, as on the H200 (2026-11-28) for 15 models each. There
# every attention value is probed at this precision, so the row says whether its kernel serves the model.
GPU_ATTENTION_PRECISION = "bf16"


def row_knobs(knob: str, value: object, device: torch.device) -> Knobs:
    """The knobs one row probes: the reference's with `knob` set to `value`; on CUDA an attention
    value also runs at GPU_ATTENTION_PRECISION."""
    knobs = dataclasses.replace(REFERENCE_KNOBS, **{knob: value})
    if knob == "attention" and device.type == "cuda":
        knobs = dataclasses.replace(knobs, precision=GPU_ATTENTION_PRECISION)
    return knobs


def runnable_here(values: Sequence[KnobValue], device: torch.device) -> tuple[list[KnobValue], dict[KnobValue, str]]:
    """(the values that can run on `device`, {value: why not} for the others), by each value's
    registry needs as `hpo doctor` checks them: a missing package, a device its kernels do not
    exist for, a capability probe that says no."""
    runnable, not_here = [], {}
    for knob, value in values:
        capability = value_capability(knob, value, device) if knob in CHECKED_KNOBS else None
        if capability is None or capability.usable:
            runnable.append((knob, value))
        else:
            not_here[(knob, value)] = capability.why
    return runnable, not_here


def trial_config(model: ZooModel, knobs: Knobs, device: torch.device, compile_backend: str = "inductor") -> TrialConfig:
    return TrialConfig(
        workload=model.workload,
        workload_options=dict(model.options),
        training=TrainingConfig(lr=1e-3, batch_size=BATCH_SIZE, compile_backend=compile_backend),
        knobs=knobs,
        device=device.type,
        skip_slow=False,  # compatibility only: a CPU's speed under load is no verdict here
    )


def probe_model(
    model: ZooModel, values: Sequence[KnobValue], device: torch.device, *, compile_backend: str = "inductor", timed: bool = False
) -> Iterator[ProbeRow]:
    """One row per knob value, probed in this process on one workload, as `hpo probe` does: the
    reference's compared step runs once and is reused by every later value."""
    workload = create_workload(model.workload, model.options)
    workload.bind_training(trial_config(model, REFERENCE_KNOBS, device).training.params())
    store, references = MemoryVerdicts(), ReferenceMemory()
    with trial_runtime(device):
        for knob, value in values:
            knobs = row_knobs(knob, value, device)
            config = trial_config(model, knobs, device, compile_backend)
            start = time.perf_counter()
            result = run_probe(workload, config, device, store, timed=timed, references=references)
            yield ProbeRow(
                model=model.name,
                knob=knob,
                value=value,
                verdict=str(result.verdict),
                blame=result.blame,
                loss_rel_err=result.loss_rel_err,
                grad_rel_err=result.grad_rel_err,
                loss_floor=result.loss_floor,
                grad_floor=result.grad_floor,
                loss_bound=result.loss_bound,
                grad_bound=result.grad_bound,
                probe_s=time.perf_counter() - start,
                observed=result.observed,
                precision=knobs.precision,
            )
