"""The allowed values of the five systems knobs, as the schema's Literal types. They are read from
`hpo.knobs.registry`, the one place a knob value is defined (no torch is imported here either)."""

from typing import Literal

from hpo.knobs.registry import (
    ATTENTION_SPECS,
    COMPILE_SPECS,
    KNOB_NAMES,
    LOADER_KNOBS,
    LOADER_SPECS,
    OPTIMIZER_SPECS,
    PRECISION_SPECS,
)

__all__ = [
    "ATTENTIONS",
    "COMPILE_MODES",
    "KNOB_NAMES",
    "LOADERS",
    "LOADER_KNOB_NAMES",
    "LoaderName",
    "OPTIMIZER_IMPLS",
    "PRECISIONS",
    "PRECISION_ALIASES",
    "Attention",
    "CompileMode",
    "OptimizerImpl",
    "Precision",
]

PRECISIONS: tuple[str, ...] = tuple(PRECISION_SPECS)
ATTENTIONS: tuple[str, ...] = tuple(ATTENTION_SPECS)
OPTIMIZER_IMPLS: tuple[str, ...] = tuple(OPTIMIZER_SPECS)
COMPILE_MODES: tuple[str, ...] = tuple(COMPILE_SPECS)
LOADERS: tuple[str, ...] = tuple(LOADER_SPECS)
LOADER_KNOB_NAMES: tuple[str, ...] = tuple(LOADER_KNOBS)

# Literal[("a", "b")] is Literal["a", "b"]: built from the registry, so a new spec is a new allowed value.
Precision = Literal[PRECISIONS]  # type: ignore[valid-type]
Attention = Literal[ATTENTIONS]  # type: ignore[valid-type]
OptimizerImpl = Literal[OPTIMIZER_IMPLS]  # type: ignore[valid-type]
CompileMode = Literal[COMPILE_MODES]  # type: ignore[valid-type]
LoaderName = Literal[LOADERS]  # type: ignore[valid-type]

PRECISION_ALIASES: dict[str, str] = {alias: spec.name for spec in PRECISION_SPECS.values() for alias in spec.aliases}
