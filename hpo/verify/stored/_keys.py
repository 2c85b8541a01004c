"""Verdict cache: one probe per (model signature, knobs, device model, software versions), shared by
every worker of a study through the study's own storage (`hpo.verify.stored._verdict_store`), and the keys of the
measurements shared beside the verdicts (the reference's step time, a model's FLOPs)."""

from __future__ import annotations

import functools
import hashlib
import json
from importlib import metadata
from typing import Any

import torch

from hpo import __version__
from hpo.config.trial import TrialConfig
from hpo.hardware.probes import device_model
from hpo.verify.stored._verdict_store import FLOPS_PREFIX, REFERENCE_PREFIX

_VERSIONED_PACKAGES = ("transformers", "flash-attn", "xformers", "apex")


@functools.cache
def package_versions() -> dict[str, str | None]:
    versions: dict[str, str | None] = {"torch": torch.__version__, "hpo": __version__}
    for name in _VERSIONED_PACKAGES:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = None
    return versions


def reference_key(config: TrialConfig, device: torch.device) -> str:
    """The key of the fp32/eager/for-loop reference's step time for this model, batch and device:
    measured once per study and shared, rather than re-timed for every knob combination."""
    return REFERENCE_PREFIX + _reference_digest(config, device)


def flops_key(config: TrialConfig, device: torch.device) -> str:
    """The key of the model's FLOPs per sample (`{"model_flops_per_sample": ...}`), counted once
    per study: by the probe's reference step, or else by the first trial's speed record."""
    return FLOPS_PREFIX + _reference_digest(config, device)


def _reference_digest(config: TrialConfig, device: torch.device) -> str:
    facts = {
        "reference": True,
        "workload": config.workload,
        "workload_options": config.workload_options,
        "batch_size": config.training.batch_size,
        "device": device_model(device),
        "versions": dict(package_versions()),
    }
    return hashlib.sha256(json.dumps(facts, sort_keys=True, default=str).encode()).hexdigest()[:16]


def verdict_key(config: TrialConfig, device: torch.device) -> tuple[str, dict[str, Any]]:
    """A short hash and the facts it hashes. The workload name and options fix the model's
    architecture, so they stand for its signature without building the model."""
    facts = {
        "workload": config.workload,
        "workload_options": config.workload_options,
        "knobs": config.knobs.as_dict(),
        "compile_backend": config.training.compile_backend,
        "device": device_model(device),
        "versions": dict(package_versions()),
        "slow_ratio": config.slow_ratio if config.skip_slow else None,
    }
    digest = hashlib.sha256(json.dumps(facts, sort_keys=True, default=str).encode()).hexdigest()[:16]
    return digest, facts


def speed_key(key: str, batch_size: int) -> str:
    """The key of a knob combination's speed fact at one batch size (`ok` with its slowdown, or
    `slow`), beside its probe verdict under `key`: speed is judged per batch size, compatibility
    once. One key per fact, so recording one never rewrites the other."""
    return f"{key}-b{batch_size}"


__all__ = ["flops_key", "package_versions", "reference_key", "speed_key", "verdict_key"]
