"""Where knob verdicts, and the measurements the probe shares, are kept: in the study's own storage
(study user attrs, so every worker and optuna-dashboard see them) or in memory for `hpo train` and
benchmarks.

A knob verdict or speed fact is kept as `verdict:<key>`. The measurements kept beside them are not
verdicts and have prefixes of their own, carried by their keys (`hpo.verify.stored._keys`): the fp32
reference's step time as `reference:<key>`, a model's FLOPs per sample as `flops:<key>`. Studies
written by earlier builds of hpo hold those two under `verdict:reference-<key>` and
`verdict:flops-reference-<key>`; reading still finds them there.

Torch-free: the sampler wrapper reads the study's verdicts in processes that never import torch.
"""

from __future__ import annotations

from typing import Protocol

from hpo.storage import add_study_user_attr

__all__ = ["FLOPS_PREFIX", "REFERENCE_PREFIX", "VERDICT_PREFIX", "MemoryVerdicts", "StudyVerdicts", "VerdictStore"]

VERDICT_PREFIX = "verdict:"
REFERENCE_PREFIX = "reference:"
FLOPS_PREFIX = "flops:"
# Where studies written by earlier builds of hpo kept each measurement: under the verdicts' prefix.
_OLD_MEASUREMENT_PREFIXES = {
    REFERENCE_PREFIX: VERDICT_PREFIX + "reference-",
    FLOPS_PREFIX: VERDICT_PREFIX + "flops-reference-",
}


def attr_names(key: str) -> tuple[str, ...]:
    """The study user attr a key is written under, then any older one it may be read from."""
    for prefix, old_prefix in _OLD_MEASUREMENT_PREFIXES.items():
        if key.startswith(prefix):
            return key, old_prefix + key.removeprefix(prefix)
    return (VERDICT_PREFIX + key,)


class VerdictStore(Protocol):
    """`put` records a measurement anyone may refresh (the reference's step time); `add` records a
    fact only if none is recorded under its key yet, so a later write never erases another
    worker's verdict. Each fact has a key of its own (`hpo.verify.stored._keys`); a measurement's key
    starts with its prefix (`reference:`, `flops:`), a verdict's has none."""

    def get(self, key: str) -> dict | None: ...

    def put(self, key: str, record: dict) -> None: ...

    def add(self, key: str, record: dict) -> bool: ...

    def all(self) -> dict[str, dict]: ...


class StudyVerdicts:
    """Verdicts kept as study user attributes, so optuna-dashboard shows them too."""

    def __init__(self, study) -> None:
        self.study = study

    def get(self, key: str) -> dict | None:
        attrs = self.study.user_attrs
        return next((attrs[name] for name in attr_names(key) if name in attrs), None)

    def put(self, key: str, record: dict) -> None:
        self.study.set_user_attr(attr_names(key)[0], record)

    def add(self, key: str, record: dict) -> bool:
        if self.get(key) is not None:  # an older study may hold it under its old name
            return False
        return add_study_user_attr(self.study, attr_names(key)[0], record)

    def all(self) -> dict[str, dict]:
        """The cached knob verdicts and speed facts (not the measurements of older studies, which
        were kept under the same prefix)."""
        return {
            k.removeprefix(VERDICT_PREFIX): v
            for k, v in self.study.user_attrs.items()
            if k.startswith(VERDICT_PREFIX) and isinstance(v, dict) and "verdict" in v
        }


class MemoryVerdicts:
    """Per-process verdicts for `hpo train` and benchmarks."""

    def __init__(self) -> None:
        self.records: dict[str, dict] = {}

    def get(self, key: str) -> dict | None:
        return self.records.get(key)

    def put(self, key: str, record: dict) -> None:
        self.records[key] = record

    def add(self, key: str, record: dict) -> bool:
        return self.records.setdefault(key, record) is record

    def all(self) -> dict[str, dict]:
        return {k: v for k, v in self.records.items() if isinstance(v, dict) and "verdict" in v}
