"""Workload name -> factory. Built-ins are imported lazily (transformers is slow to import);
a user's own workload is `package.module:factory`, imported only because the user wrote it."""

from __future__ import annotations

import importlib
from typing import Any

from hpo.errors import UserInputError
from hpo.workloads.base import Workload, WorkloadOptions, build_options

BUILTIN_WORKLOADS: dict[str, str] = {
    "text_classification": "hpo.workloads.text_classification:TextClassification",
    "timeseries_classification": "hpo.workloads.timeseries_classification:TimeseriesClassification",
    "causal_lm": "hpo.workloads.causal_lm:CausalLM",
}


def resolve_factory(name: str) -> type[Workload]:
    target = BUILTIN_WORKLOADS.get(name, name)
    if ":" not in target:
        raise UserInputError(
            f"workload.name: unknown workload {name!r}; use one of {sorted(BUILTIN_WORKLOADS)} "
            f"or 'package.module:factory' for your own"
        )
    module_name, _, attr = target.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise UserInputError(f"workload.name: cannot import {module_name!r} for workload {name!r}: {exc}") from None
    factory = getattr(module, attr, None)
    if factory is None:
        raise UserInputError(f"workload.name: module {module_name!r} has no attribute {attr!r}")
    return factory


def parse_options(name: str, raw: dict[str, Any]) -> WorkloadOptions:
    factory = resolve_factory(name)
    return build_options(getattr(factory, "Options", WorkloadOptions), raw, "workload")


def create_workload(name: str, raw_options: dict[str, Any]) -> Workload:
    factory = resolve_factory(name)
    workload = factory(parse_options(name, raw_options))
    if not isinstance(workload, Workload):
        raise UserInputError(f"workload.name: {name!r} built a {type(workload).__name__}, not an hpo Workload")
    return workload


def metrics_of(name: str) -> tuple[str, ...]:
    return tuple(getattr(resolve_factory(name), "metrics", ()))
