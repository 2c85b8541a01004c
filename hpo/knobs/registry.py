"""The knobs' value specs and names, gathered from the knob modules (`hpo.knobs.systems`), for the
code that looks a value up by knob: the builders, the machine check, the doctor.

A spec says what a value needs (device types, an optional package, a capability probe), how it is
applied (a builder named as "module:attr", imported only when used) and how the evidence of a real
step recognises it. Nothing is declared here: each table is its knob module's.

This module imports no torch: `hpo validate` reads the allowed values from here and must start fast.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from typing import Any

from hpo.knobs.knob import Needs
from hpo.knobs.systems import KNOBS, LOADER_KNOBS, TRIAL_KNOBS
from hpo.knobs.systems.attention import ATTENTION_SPECS, AttentionSpec
from hpo.knobs.systems.compile import COMPILE_SPECS, CompileSpec
from hpo.knobs.systems.loader import LOADER_SPECS, LoaderSpec
from hpo.knobs.systems.optimizer import OPTIMIZER_SPECS, OptimizerEvidence, OptimizerSpec
from hpo.knobs.systems.precision import PRECISION_SPECS, PrecisionSpec

__all__ = [
    "ATTENTION_SPECS",
    "COMPILE_SPECS",
    "KNOBS",
    "KNOB_DEFAULTS",
    "KNOB_NAMES",
    "LOADER_KNOBS",
    "LOADER_SPECS",
    "OPTIMIZER_SPECS",
    "PRECISION_SPECS",
    "VALUE_SPECS",
    "AttentionSpec",
    "CompileSpec",
    "LoaderSpec",
    "Needs",
    "OptimizerEvidence",
    "OptimizerSpec",
    "PrecisionSpec",
    "load",
    "spec_for",
]

# The knobs whose values have specs (what each needs, how it is built), by knob name.
VALUE_SPECS: dict[str, Mapping[str, Any]] = {name: k.specs for name, k in KNOBS.items() if k.specs}
# The knobs of a trial's `Knobs`, in the order configs, exports and records list them.
KNOB_NAMES: tuple[str, ...] = tuple(TRIAL_KNOBS)
# Each trial knob's value where a file names none.
KNOB_DEFAULTS: dict[str, Any] = {name: k.default for name, k in TRIAL_KNOBS.items()}


def spec_for(knob: str, value: str) -> Any:
    """The spec of `value` for `knob`; an unknown value raises an error naming the valid ones."""
    table = VALUE_SPECS.get(knob)
    if table is None:
        raise KeyError(f"knob must be one of {list(VALUE_SPECS)}, got {knob!r}")
    if value not in table:
        raise KeyError(f"{knob} must be one of {list(table)}, got {value!r}")
    return table[value]


def load(ref: str) -> Any:
    """Import what a "module:attr" builder reference names (the import is deferred to first use)."""
    module, _, attr = ref.partition(":")
    return getattr(importlib.import_module(module), attr)
