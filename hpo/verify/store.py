"""Where knob verdicts are kept: in the study's own storage (study user attrs `verdict:<key>`, so
every worker and optuna-dashboard see them) or in memory for `hpo train` and benchmarks.

Torch-free: the sampler wrapper reads the study's verdicts in processes that never import torch.
"""

from __future__ import annotations

from typing import Protocol

from hpo.storage.optuna_compat import add_study_user_attr

__all__ = ["VERDICT_PREFIX", "MemoryVerdicts", "StudyVerdicts", "VerdictStore"]

VERDICT_PREFIX = "verdict:"


class VerdictStore(Protocol):
    """`put` records a measurement anyone may refresh (the reference's step time); `add` records a
    fact only if none is recorded under its key yet, so a later write never erases another
    worker's verdict. Each fact has a key of its own (`hpo.verify.cache`)."""

    def get(self, key: str) -> dict | None: ...

    def put(self, key: str, record: dict) -> None: ...

    def add(self, key: str, record: dict) -> bool: ...

    def all(self) -> dict[str, dict]: ...


class StudyVerdicts:
    """Verdicts kept as study user attributes, so optuna-dashboard shows them too."""

    def __init__(self, study) -> None:
        self.study = study

    def get(self, key: str) -> dict | None:
        return self.study.user_attrs.get(VERDICT_PREFIX + key)

    def put(self, key: str, record: dict) -> None:
        self.study.set_user_attr(VERDICT_PREFIX + key, record)

    def add(self, key: str, record: dict) -> bool:
        return add_study_user_attr(self.study, VERDICT_PREFIX + key, record)

    def all(self) -> dict[str, dict]:
        """The cached knob verdicts (not the reference timings kept beside them)."""
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
