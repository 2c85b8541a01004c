"""Workload options without torch: the base dataclass, the builder that checks user keys, and one
module per built-in workload holding its `Options` and `METRICS`.

`hpo validate` reads a workload's options and metrics from here, so checking a file never imports
torch or transformers; the model code (`hpo.workloads.<name>`) uses the same classes.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from hpo.errors import UserInputError

__all__ = ["WorkloadOptions", "build_options"]


@dataclasses.dataclass(frozen=True, kw_only=True)
class WorkloadOptions:
    """Base for a workload's options; subclasses add fields with defaults."""

    seed: int = 0


def build_options(options_cls: type[WorkloadOptions], raw: Mapping[str, Any], where: str) -> WorkloadOptions:
    """Construct `options_cls` from user keys, naming unknown keys and bad values."""
    known = {f.name for f in dataclasses.fields(options_cls)}
    unknown = sorted(set(raw) - known)
    if unknown:
        raise UserInputError(f"{where}.{unknown[0]}: unknown option for this workload; known options: {sorted(known)}")
    try:
        return options_cls(**raw)
    except (TypeError, ValueError) as exc:
        raise UserInputError(f"{where}: {exc}") from None
