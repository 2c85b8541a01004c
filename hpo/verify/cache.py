"""Verdict cache: one probe per (model signature, knobs, device model, software versions), shared by
every worker of a study through the study's own storage (study user attrs `verdict:<key>`)."""

from __future__ import annotations

import functools
import hashlib
import json
from importlib import metadata
from typing import Any, Protocol

import torch

from hpo import __version__
from hpo.config import TrialConfig
from hpo.hardware.probes import device_model

VERDICT_PREFIX = "verdict:"
_VERSIONED_PACKAGES = ("transformers", "flash-attn", "xformers", "apex")


@functools.cache
def _package_versions() -> dict[str, str | None]:
    versions: dict[str, str | None] = {"torch": torch.__version__, "hpo": __version__}
    for name in _VERSIONED_PACKAGES:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = None
    return versions


def verdict_key(config: TrialConfig, device: torch.device) -> tuple[str, dict[str, Any]]:
    """A short hash and the facts it hashes. The workload name and options fix the model's
    architecture, so they stand for its signature without building the model."""
    facts = {
        "workload": config.workload,
        "workload_options": config.workload_options,
        "knobs": config.knobs.as_dict(),
        "compile_backend": config.training.compile_backend,
        "device": device_model(device),
        "versions": dict(_package_versions()),
        "slow_ratio": config.slow_ratio if config.skip_slow else None,
    }
    digest = hashlib.sha256(json.dumps(facts, sort_keys=True, default=str).encode()).hexdigest()[:16]
    return digest, facts


class VerdictStore(Protocol):
    def get(self, key: str) -> dict | None: ...

    def put(self, key: str, record: dict) -> None: ...


class StudyVerdicts:
    """Verdicts kept as study user attributes, so optuna-dashboard shows them too."""

    def __init__(self, study) -> None:
        self.study = study

    def get(self, key: str) -> dict | None:
        return self.study.user_attrs.get(VERDICT_PREFIX + key)

    def put(self, key: str, record: dict) -> None:
        self.study.set_user_attr(VERDICT_PREFIX + key, record)

    def all(self) -> dict[str, dict]:
        return {k.removeprefix(VERDICT_PREFIX): v for k, v in self.study.user_attrs.items() if k.startswith(VERDICT_PREFIX)}


class MemoryVerdicts:
    """Per-process verdicts for `hpo train` and benchmarks."""

    def __init__(self) -> None:
        self.records: dict[str, dict] = {}

    def get(self, key: str) -> dict | None:
        return self.records.get(key)

    def put(self, key: str, record: dict) -> None:
        self.records[key] = record
