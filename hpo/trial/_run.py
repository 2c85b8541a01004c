"""One trial on its way through the executor's steps (`hpo.trial._executor`)."""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from hpo import __version__
from hpo.config.trial import TrialConfig
from hpo.engine import AssembledModel
from hpo.hardware import resolve_device
from hpo.hardware.probes import device_model
from hpo.records import RecordKey
from hpo.trial._phases import Phases
from hpo.trial._trainer import EvalCallback, TrainResult
from hpo.verify.probing import KeptReferences
from hpo.verify.stored import VerdictStore, verdict_key
from hpo.verify.timing import SlowLimit
from hpo.workloads.base import Workload

__all__ = ["TrialRun"]


@dataclass
class TrialRun:
    """One trial on its way: what it was given, and what each step leaves for the next."""

    config: TrialConfig
    verdicts: VerdictStore
    on_eval: EvalCallback | None
    phases: Phases
    references: KeptReferences | None
    device: torch.device = field(init=False)
    key: str = field(init=False)  # the knob verdict's key in the cache
    facts: dict = field(init=False)  # what the key hashes
    attrs: dict = field(init=False)  # the trial's record so far
    workload: Workload | None = None
    model: AssembledModel | None = None  # handed on by the probe, or built; dropped after training
    slow_limit: SlowLimit | None = None
    result: TrainResult | None = None

    def __post_init__(self) -> None:
        self.device = resolve_device(self.config.device)
        self.key, self.facts = verdict_key(self.config, self.device)
        self.attrs = {
            RecordKey.CONFIG: self.config.to_dict(),
            RecordKey.KNOBS_REQUESTED: self.config.knobs.as_dict(),
            RecordKey.LOADER_REQUESTED: self.config.loader.as_dict(),
            RecordKey.DEVICE: device_model(self.device),
            RecordKey.TORCH_VERSION: torch.__version__,
            RecordKey.HPO_VERSION: __version__,
            RecordKey.VERDICT_KEY: self.key,
        }
