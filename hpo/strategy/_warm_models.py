"""The sweep's timed models, handed on to probe_first's race (`hpo.strategy._race.raced_times`), so
the race neither builds nor warms up again a model the sweep has just stepped at the study's batch.

On the MiniLM text classifier (12 combinations, 2-core EPYC) the race spent 19.5 s of a 42.6 s sweep
mostly building each model again (the pretrained weights read anew) and running its untimed step; a
compiled model would also compile again. A model is kept only while it fits: the weights, gradients
and optimizer state of every kept model, with the largest step peak seen so far (one model steps at
a time), stay under `SHARE` of the device's memory. Past that, the race builds the model as before.
"""

from __future__ import annotations

import os

import torch

from hpo.engine import AssembledModel
from hpo.knobs.registry import KNOB_DEFAULTS, KNOB_NAMES

__all__ = ["SHARE", "WarmModels", "knobs_key", "state_bytes"]

# Of the device's memory (a CPU's: the machine's): the kept models' state and one step's peak.
SHARE = 0.5


def knobs_key(knobs: dict) -> str:
    """One combination's key: its knob values in registry order (a knob it does not name at its default)."""
    return "/".join(str(knobs.get(k, KNOB_DEFAULTS[k])) for k in KNOB_NAMES)


def state_bytes(assembled: AssembledModel) -> int:
    """What a kept model holds between steps: its parameters, their gradients and the optimizer's state."""
    tensors = list(assembled.model.parameters())
    tensors += [p.grad for p in tensors if p.grad is not None]
    tensors += [v for state in assembled.optimizer.state.values() for v in state.values() if isinstance(v, torch.Tensor)]
    return sum(t.numel() * t.element_size() for t in tensors)


def _device_bytes(device: torch.device) -> int:
    if device.type == "cuda":
        return torch.cuda.mem_get_info(device)[1]
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


class WarmModels:
    """Models keyed by `knobs_key`, each already stepped at the study's batch."""

    def __init__(self) -> None:
        self.models: dict[str, AssembledModel] = {}
        self.kept_bytes = 0
        self.peak_bytes = 0

    def offer(self, assembled: AssembledModel, peak_mb: float | None) -> None:
        """Keep `assembled` if it fits beside the others (`peak_mb`: its step's peak); else drop it."""
        self.peak_bytes = max(self.peak_bytes, int((peak_mb or 0) * 2**20))
        size = state_bytes(assembled)
        if self.kept_bytes + size + self.peak_bytes <= SHARE * _device_bytes(assembled.device):
            self.models[knobs_key(assembled.knobs.as_dict())] = assembled
            self.kept_bytes += size

    def take(self, knobs: dict) -> AssembledModel | None:
        """The kept model of `knobs`, handed over (no longer kept here), or None."""
        return self.models.pop(knobs_key(knobs), None)

    def clear(self) -> None:
        self.models.clear()
        self.kept_bytes = 0
