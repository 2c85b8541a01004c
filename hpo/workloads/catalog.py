"""Workload name -> factory, and name -> options and metrics.

A built-in workload's options and metrics live in a torch-free module (`hpo.workloads.options.<name>`),
so checking a file (`hpo validate`) never imports torch or transformers; its model code is imported
only to build it. A user's own workload is `package.module:Class`, imported because the user wrote it.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from types import ModuleType
from typing import TYPE_CHECKING, Any

from hpo.deps import require_extra
from hpo.errors import UserInputError
from hpo.workloads.options import WorkloadOptions, build_options

if TYPE_CHECKING:
    from hpo.workloads.base import Workload

__all__ = [
    "BUILTIN_OPTIONS",
    "BUILTIN_WORKLOADS",
    "NEEDS_USER_FILES",
    "SELF_CONTAINED_WORKLOADS",
    "checkpoint_option",
    "create_workload",
    "fetch_checkpoints",
    "metrics_of",
    "options_class",
    "parse_options",
    "resolve_factory",
    "trainer_of",
]

BUILTIN_WORKLOADS: dict[str, str] = {
    "text_classification": "hpo.workloads.text_classification:TextClassification",
    "timeseries_classification": "hpo.workloads.timeseries_classification:TimeseriesClassification",
    "causal_lm": "hpo.workloads.causal_lm:CausalLM",
    "causal_lm_lightning": "hpo.workloads.causal_lm_lightning:CausalLMLightning",
    "hf_text_classification": "hpo.workloads.hf_text_classification:HFTextClassification",
    "hf_causal_lm": "hpo.workloads.hf_causal_lm:HFCausalLM",
    "png_images": "hpo.workloads.png_images:PngImages",
}
# Built-ins that train on the user's own checkpoint and data files: they have no run without them.
NEEDS_USER_FILES = ("hf_text_classification", "hf_causal_lm")
SELF_CONTAINED_WORKLOADS = tuple(name for name in BUILTIN_WORKLOADS if name not in NEEDS_USER_FILES)
DIRECTIONS = ("minimize", "maximize")
# Each module defines `Options` (the dataclass the workload class uses) and `METRICS`.
BUILTIN_OPTIONS: dict[str, str] = {name: f"hpo.workloads.options.{name}" for name in BUILTIN_WORKLOADS}


def resolve_factory(name: str) -> type:
    """The workload class (or factory) for a built-in name or a `package.module:Class` target."""
    target = BUILTIN_WORKLOADS.get(name, name)
    if ":" not in target:
        raise UserInputError(
            f"workload.name: unknown workload {name!r}; use one of {sorted(BUILTIN_WORKLOADS)} "
            f"or 'package.module:factory' for your own"
        )
    module_name, _, attr = target.partition(":")
    factory = getattr(_import(module_name, name), attr, None)
    if factory is None:
        raise UserInputError(f"workload.name: module {module_name!r} has no attribute {attr!r}")
    return factory


def _import(module_name: str, name: str) -> ModuleType:
    try:
        return importlib.import_module(module_name)
    except ImportError as exc:
        raise UserInputError(f"workload.name: cannot import {module_name!r} for workload {name!r}: {exc}") from None


def options_class(name: str) -> type[WorkloadOptions]:
    """The workload's options dataclass; a built-in's without importing its model. A built-in whose
    packages (an extra of hpo's) are not installed is refused here, so `hpo validate` says so in one
    line before any trial runs."""
    if name in BUILTIN_OPTIONS:
        module = _import(BUILTIN_OPTIONS[name], name)
        require_extra(f"workload.name: {name}", module.PACKAGES, module.EXTRA)
        return module.Options
    return getattr(resolve_factory(name), "Options", WorkloadOptions)


def trainer_of(name: str) -> str:
    """The loop that trains the workload: "lightning" (Lightning's Trainer) or "hpo"; a built-in's
    from its torch-free options module (its `TRAINER`), a user's from its class."""
    if name in BUILTIN_OPTIONS:
        return getattr(_import(BUILTIN_OPTIONS[name], name), "TRAINER", "hpo")
    return getattr(resolve_factory(name), "trainer", "hpo")


def checkpoint_option(name: str) -> str | None:
    """The option naming a built-in's Hugging Face checkpoint (a local folder or a hub id, which `hpo
    run`, `hpo worker` and `hpo train` fetch before the first trial); None for a workload without one."""
    if name not in BUILTIN_OPTIONS:
        return None
    return getattr(_import(BUILTIN_OPTIONS[name], name), "CHECKPOINT_OPTION", None)


def parse_options(name: str, raw: dict[str, Any]) -> WorkloadOptions:
    """The workload's options dataclass from user keys; a built-in's without importing its model."""
    return build_options(options_class(name), raw, "workload")


def metrics_of(name: str) -> dict[str, str | None]:
    """The metrics the workload reports, each with the direction it declares: a `metrics` mapping
    gives each one, the tuple form names them with None (unknown). Empty when it does not say."""
    if name in BUILTIN_OPTIONS:
        declared = _import(BUILTIN_OPTIONS[name], name).METRICS
    else:
        declared = getattr(resolve_factory(name), "metrics", ())
    if not isinstance(declared, Mapping):
        return {str(metric): None for metric in declared}
    bad = {metric: d for metric, d in declared.items() if d not in DIRECTIONS}
    if bad:
        raise UserInputError(
            f"workload.name: workload {name!r} declares metrics = {dict(declared)}; each direction must be "
            f"one of {list(DIRECTIONS)}, got {bad}"
        )
    return dict(declared)


def create_workload(name: str, raw_options: dict[str, Any]) -> Workload:
    """Build the workload (imports its model code, and so torch)."""
    from hpo.workloads.base import Workload  # torch: only when a workload is built

    factory = resolve_factory(name)
    workload = factory(parse_options(name, raw_options))
    if not isinstance(workload, Workload):
        raise UserInputError(f"workload.name: {name!r} built a {type(workload).__name__}, not an hpo Workload")
    return workload


def fetch_checkpoints(space) -> None:
    """Each Hugging Face hub id the space's workload names and the cache lacks, downloaded here, once,
    before the first trial: the trial processes (and the forkserver's warm-up) then only read the cache."""
    key = checkpoint_option(space.spec.workload.name)
    if key is None:
        return
    from hpo.workloads.options.hf_models import fetch

    for value in dict.fromkeys(space.option_values(key)):
        fetch(value)
