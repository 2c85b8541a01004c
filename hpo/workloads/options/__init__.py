"""Workload options without torch: the base dataclass, the builder that checks user keys, and one
module per built-in workload holding its `Options` and `METRICS`.

`hpo validate` reads a workload's options and metrics from here, so checking a file never imports
torch or transformers; the model code (`hpo.workloads.<name>`) uses the same classes.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from hpo.workloads.options.typed_fields import build_dataclass, check_field

__all__ = ["WorkloadOptions", "build_options", "check_field"]


@dataclasses.dataclass(frozen=True, kw_only=True)
class WorkloadOptions:
    """Base for a workload's options; subclasses add fields with defaults."""

    seed: int = 0


def build_options(options_cls: type[WorkloadOptions], raw: Mapping[str, Any], where: str) -> WorkloadOptions:
    """Construct `options_cls` from user keys: an unknown or missing key, or a value not of its
    field's annotated type, is one line naming `where.<key>` (`hpo.workloads.options.typed_fields`);
    then the dataclass's own checks run."""
    return build_dataclass(options_cls, raw, where)
