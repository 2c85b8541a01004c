"""Training hyperparameter specs: a scalar is fixed, {low, high[, log, step]} a range, {choices} a set."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from hpo.errors import UserInputError

_RANGE_KEYS = {"low", "high", "log", "step"}


@dataclass(frozen=True)
class FloatRange:
    low: float
    high: float
    log: bool = False
    step: float | None = None


@dataclass(frozen=True)
class IntRange:
    low: int
    high: int
    log: bool = False
    step: int = 1


@dataclass(frozen=True)
class Choices:
    choices: tuple


@dataclass(frozen=True)
class Fixed:
    value: Any


ParamSpec = FloatRange | IntRange | Choices | Fixed


def parse_param(path: str, raw: Any) -> ParamSpec:
    """Turn one `params:` entry into a spec, or raise a UserInputError naming `path`."""
    if not isinstance(raw, dict):
        return Fixed(raw)
    if "choices" in raw:
        return _parse_choices(path, raw)
    unknown = set(raw) - _RANGE_KEYS
    if unknown or not {"low", "high"} <= set(raw):
        raise UserInputError(
            f"{path}: a param is a scalar, {{choices: [...]}} or {{low, high[, log, step]}}; "
            f"got keys {sorted(raw)}"
        )
    return _parse_range(path, raw)


def _parse_choices(path: str, raw: dict) -> Choices:
    choices = raw["choices"]
    if len(raw) != 1 or not isinstance(choices, list) or not choices:
        raise UserInputError(f"{path}: choices must be the only key and a non-empty list, got {raw!r}")
    return Choices(tuple(choices))


def _parse_range(path: str, raw: dict) -> FloatRange | IntRange:
    low, high, log, step = raw["low"], raw["high"], raw.get("log", False), raw.get("step")
    for key, value in (("low", low), ("high", high)) + ((("step", step),) if step is not None else ()):
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise UserInputError(f"{path}.{key} must be a number, got {value!r}")
    if not isinstance(log, bool):
        raise UserInputError(f"{path}.log must be true or false, got {log!r}")
    if low > high:
        raise UserInputError(f"{path}: low <= high must hold, got low={low}, high={high}")
    if step is not None and step <= 0:
        raise UserInputError(f"{path}.step must be > 0, got {step}")
    if log and low <= 0:
        raise UserInputError(f"{path}: a log range needs low > 0, got low={low}")
    if log and step is not None and step != 1:
        raise UserInputError(f"{path}: log and step cannot be combined, got step={step}")
    if all(isinstance(v, int) for v in (low, high)) and (step is None or isinstance(step, int)):
        return IntRange(low, high, log, step or 1)
    return FloatRange(float(low), float(high), log, None if step is None else float(step))
