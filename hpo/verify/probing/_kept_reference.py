"""The reference's side of the probe's comparison, kept between probes of one model.

Every probe compares the trial's loss and gradients with the fp32/eager/for-loop reference's, on
the same compared samples and from the same initial weights. Those three things (the initial
weights, the reference's loss and its gradients) depend on the model, the seed and the compared
samples, never on the trial's knobs. So a probe of a second knob combination need not build the
reference and run its step again: it reads them from the `ReferenceFiles` of its worker, written by
the first probe.

They go to disk only when another process will read them. A worker whose trials each run in a
process of their own (`hpo.runtime._child_trials`) keeps them as files (`ReferenceFiles`): the trial
memory-maps them, reads them once in the comparison and drops them when the probe ends. Trials that
share one process (`hpo worker --in-process`, `hpo probe`'s sweep) keep them in that process's
memory (`ReferenceMemory`), on the host: nothing is written or read back. On a CPU device the kept
copy (the gradients and initial weights, twice the parameters) is part of the process's resident
set, which a later in-process trial's peak memory then includes.

The key leaves out the training hyperparameters (learning rate, weight decay...) only for a
workload that declares its model and loss do not read them (`Workload.model_reads_hparams`).
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import torch

from hpo.config.trial import TrialConfig
from hpo.hardware.probes import device_model
from hpo.logging import get_logger
from hpo.verify.probing._bounds import Errors
from hpo.verify.stored import package_versions
from hpo.workloads.base import Workload

_log = get_logger(__name__)

__all__ = ["ComparedReference", "KeptReferences", "ReferenceFiles", "ReferenceMemory", "compared_key"]


@dataclass(frozen=True)
class ComparedReference:
    """The reference's compared step: its loss, its fp32 gradients (in parameter order), the
    initial weights (the state dict) it started from, which the trial loads, and how many samples
    it ran on. `floors` fills in as probes measure the model's rounding floor per precision
    (`hpo.verify.probing._bounds`)."""

    loss: float
    grads: list[torch.Tensor]
    initial: dict[str, torch.Tensor]
    samples: int
    floors: dict[str, Errors] = field(default_factory=dict)
    # Why the step is no fp32/eager reference (it ran another kernel or dtype): comparisons against
    # it judge nothing (`hpo.verify.fault.ran_other_than_reference`). None: its own knobs were observed as asked.
    ran_other: str | None = None

    def on_host(self) -> ComparedReference:
        """A copy on the host, sharing no storage with the probe's tensors: `initial` holds the
        reference's own parameters, which its timing updates after it is kept."""
        return ComparedReference(
            self.loss,
            [g.detach().to("cpu", copy=True) for g in self.grads],
            {k: v.detach().to("cpu", copy=True) for k, v in self.initial.items()},
            self.samples,
            self.floors,  # shared: a floor measured later is kept for the next probe too
            self.ran_other,
        )

    def to(self, device: torch.device) -> ComparedReference:
        if device.type == "cpu":
            return self
        return ComparedReference(
            self.loss,
            [g.to(device) for g in self.grads],
            {k: v.to(device) for k, v in self.initial.items()},
            self.samples,
            self.floors,
            self.ran_other,
        )


def compared_key(workload: Workload, config: TrialConfig, device: torch.device) -> str:
    """What the reference's compared step depends on: the model (workload and options), the seed,
    the compared batch (a compiled trial's is its training batch), the device and the software; the
    training hyperparameters only when the workload's model reads them. How many samples the
    compared step takes otherwise follows from the model (`hpo.verify.probing._samples.compared_samples`) and
    is kept with it."""
    facts = {
        "compared": True,
        "workload": config.workload,
        "workload_options": config.workload_options,
        "seed": config.seed,
        "compared_batch": config.training.batch_size if config.knobs.compile else "probe",
        "hparams": config.training.params() if workload.model_reads_hparams else None,
        "device": device_model(device),
        "versions": dict(package_versions()),
    }
    return "compared-" + hashlib.sha256(json.dumps(facts, sort_keys=True, default=str).encode()).hexdigest()[:16]


class ReferenceFiles:
    """A folder of compared references, one file per key, shared by the probes of one worker's
    trial processes. A file is written under a temporary name and renamed, so a reader sees a
    whole file or none."""

    def __init__(self, directory: str | os.PathLike) -> None:
        self.directory = Path(directory)

    def _path(self, key: str) -> Path:
        return self.directory / f"{key}.pt"

    def get(self, key: str, device: torch.device) -> ComparedReference | None:
        path = self._path(key)
        if not path.exists():
            return None
        saved = torch.load(path, mmap=True, weights_only=True, map_location="cpu")
        floors = {precision: Errors(*errors) for precision, errors in saved["floors"].items()}
        reference = ComparedReference(
            float(saved["loss"]), list(saved["grads"]), dict(saved["initial"]), int(saved["samples"]), floors
        )
        return reference.to(device)

    def put(self, key: str, reference: ComparedReference) -> bool:
        """Write `reference` under `key`; False when the folder cannot take it (a full disk): the
        later probes then run the reference themselves, as they would without a folder. Said on
        stderr, since only their cost changes, never a verdict."""
        saved = {
            "loss": reference.loss,
            "grads": [g.detach().cpu() for g in reference.grads],
            "initial": {k: v.detach().cpu() for k, v in reference.initial.items()},
            "samples": reference.samples,
            "floors": {precision: [errors.loss, errors.grad] for precision, errors in reference.floors.items()},
        }
        tmp = None
        try:
            fd, tmp = tempfile.mkstemp(dir=self.directory, prefix=".writing-", suffix=".pt")
            with os.fdopen(fd, "wb") as f:
                torch.save(saved, f)
            os.replace(tmp, self._path(key))
        except OSError as exc:
            if tmp is not None:
                Path(tmp).unlink(missing_ok=True)
            _log.warning(f"hpo: the probe's reference step was not kept in {self.directory} ({exc}); later probes run it again")
            return False
        return True


class ReferenceMemory:
    """The compared references of the probes that share this process, kept on the host (a GPU's
    memory is the next trial's); the same interface as `ReferenceFiles`, with nothing on disk."""

    def __init__(self) -> None:
        self._kept: dict[str, ComparedReference] = {}

    def get(self, key: str, device: torch.device) -> ComparedReference | None:
        kept = self._kept.get(key)
        return None if kept is None else kept.to(device)

    def put(self, key: str, reference: ComparedReference) -> bool:
        self._kept[key] = reference.on_host()
        return True


KeptReferences = ReferenceFiles | ReferenceMemory  # where a worker's probes keep their references
