"""Param specs (a scalar is fixed, {low, high[, log, step]} a range, a list or {choices} a set), the
rules the trainer's own params obey, and whether a value lies inside a spec."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Annotated, Any

from pydantic import Field, StrictFloat, StrictInt, TypeAdapter, ValidationError

from hpo.errors import UserInputError
from hpo.workloads.options.typed_fields import looks_numeric

__all__ = [
    "TRAINING_RULES",
    "AutoBatch",
    "Choices",
    "Fixed",
    "FloatRange",
    "IntRange",
    "ParamSpec",
    "candidates",
    "check_training_param",
    "contains",
    "describe",
    "parse_auto_batch",
    "parse_param",
]

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
    # `[a, b]` rather than `{choices: [a, b]}`: only how a key path into it is spelled.
    listed: bool = field(default=False, repr=False, compare=False)

    def path_of(self, path: str, index: int) -> str:
        return f"{path}[{index}]" if self.listed else f"{path}.choices[{index}]"


@dataclass(frozen=True)
class Fixed:
    value: Any


@dataclass(frozen=True)
class AutoBatch:
    """`batch_size: auto`: each trial trains at the largest batch, up to `max` and a multiple of
    `multiple_of`, that its knobs fit in the memory limit (`hpo.trial._memory_limit`). Not a
    sampler's param: the trial records the batch it ran."""

    max: int = 1024
    multiple_of: int = 1
    # The batch `params.lr` is the rate for, which `lr_scaling` scales from (`hpo.config.lr_scaling`).
    base_batch: int | None = None
    lr_scaling: str = "none"

    def record(self) -> dict[str, Any]:
        base = {} if self.base_batch is None else {"base_batch": self.base_batch}
        return {"auto": {"max": self.max, "multiple_of": self.multiple_of, **base}}


ParamSpec = FloatRange | IntRange | Choices | Fixed | AutoBatch


def parse_auto_batch(path: str, raw: Any) -> AutoBatch | None:
    """`auto` or `{auto: {max, multiple_of, base_batch}}` as an AutoBatch; None for any other batch size spec."""
    if raw == "auto":
        return AutoBatch()
    if not isinstance(raw, dict) or "auto" not in raw:
        return None
    options = raw["auto"] if raw["auto"] is not None else {}
    if len(raw) != 1 or not isinstance(options, dict) or set(options) - {"max", "multiple_of", "base_batch"}:
        raise UserInputError(
            f"{path}: an automatic batch size is `auto` or {{auto: {{max: 1024, multiple_of: 8, base_batch: 64}}}}, got {raw!r}"
        )
    for key, value in options.items():
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise UserInputError(f"{path}.auto.{key} must be an integer >= 1, got {value!r}")
    spec = AutoBatch(**options)
    if spec.multiple_of > spec.max:
        raise UserInputError(f"{path}.auto: multiple_of <= max must hold, got multiple_of={spec.multiple_of}, max={spec.max}")
    return spec


def parse_param(path: str, raw: Any) -> ParamSpec:
    """Turn one `params:` entry into a spec, or raise a UserInputError naming `path`."""
    if isinstance(raw, list):
        return _choices(path, raw, listed=True)
    if not isinstance(raw, dict):
        return Fixed(raw)
    if "choices" in raw:
        return _parse_choices(path, raw)
    unknown = set(raw) - _RANGE_KEYS
    if unknown or not {"low", "high"} <= set(raw):
        raise UserInputError(
            f"{path}: a param is a scalar, {{choices: [...]}} or {{low, high[, log, step]}}; got keys {sorted(raw)}"
        )
    return _parse_range(path, raw)


def _parse_choices(path: str, raw: dict) -> Choices:
    choices = raw["choices"]
    if len(raw) != 1 or not isinstance(choices, list) or not choices:
        raise UserInputError(f"{path}: choices must be the only key and a non-empty list, got {raw!r}")
    return _choices(path, choices, listed=False)


# What Optuna's categorical distribution holds and stores: a trial records the value it drew.
_SCALARS = (bool, int, float, str, type(None))


def _choices(path: str, values: list, listed: bool) -> Choices:
    spec = Choices(tuple(values), listed=listed)
    if not values:
        raise UserInputError(f"{path}: a list is searched and needs at least one value, got []; write a scalar to fix one")
    for i, value in enumerate(values):
        if not isinstance(value, _SCALARS):
            raise UserInputError(
                f"{spec.path_of(path, i)}: a searched value is a bool, number, string or null, got {value!r}; "
                f"a list-valued workload option is fixed under workload:, not params:"
            )
    return spec


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


_Number = StrictInt | StrictFloat
# The trainer's own hyperparameters. Every candidate value (a fixed value, a range's bounds, each
# choice) must obey its rule; every other param is a workload option, checked by the workload.
TRAINING_RULES: dict[str, TypeAdapter] = {
    "lr": TypeAdapter(Annotated[_Number, Field(gt=0)]),
    "batch_size": TypeAdapter(Annotated[StrictInt, Field(gt=0)]),
    "weight_decay": TypeAdapter(Annotated[_Number, Field(ge=0)]),
    "warmup_steps": TypeAdapter(Annotated[StrictInt, Field(ge=0)]),
    "grad_clip": TypeAdapter(Annotated[_Number, Field(ge=0)]),  # 0: no clipping
}


def check_training_param(path: str, name: str, spec: ParamSpec) -> None:
    """Raise a UserInputError naming `path` if a candidate value of trainer param `name` breaks its rule."""
    rule = TRAINING_RULES.get(name)
    if rule is None:
        return
    for where, value in candidates(path, spec):
        try:
            rule.validate_python(value)
        except ValidationError as exc:
            raise UserInputError(f"{where}: {_rule_message(exc, value)}, got {value!r}") from None


def candidates(path: str, spec: ParamSpec) -> list[tuple[str, Any]]:
    """(key path, value) for each value a spec's rule is checked on: the fixed value, each choice,
    a range's bounds."""
    if isinstance(spec, Fixed):
        return [(path, spec.value)]
    if isinstance(spec, AutoBatch):  # checked when parsed
        return []
    if isinstance(spec, Choices):
        return [(spec.path_of(path, i), value) for i, value in enumerate(spec.choices)]
    return [(f"{path}.low", spec.low), (f"{path}.high", spec.high)]


def _rule_message(exc: ValidationError, value: Any) -> str:
    # A union of int and float fails once per branch; the last ("a valid number") reads best.
    message = exc.errors()[-1]["msg"]
    if isinstance(value, str) and looks_numeric(value):
        message += f" (YAML reads {value} as text: write it with a dot, such as 1.0e-3)"
    return message


def contains(spec: ParamSpec, value: Any) -> bool:
    """Whether `value` is one the spec can take (Optuna would suggest it): a trial's, or an export's."""
    if isinstance(spec, Fixed):
        return value == spec.value and isinstance(value, bool) == isinstance(spec.value, bool)
    if isinstance(spec, Choices):
        return value in spec.choices
    if isinstance(spec, AutoBatch):
        return type(value) is int and 1 <= value <= spec.max and value % spec.multiple_of == 0
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return False
    if isinstance(spec, IntRange) and not isinstance(value, int):
        return False
    if not spec.low <= value <= spec.high:
        return False
    if spec.step is None:
        return True
    steps = (value - spec.low) / spec.step
    return abs(steps - round(steps)) < 1e-8


def describe(spec: ParamSpec | list) -> str:
    """A spec (or a knob's list of choices) in words, for error messages."""
    if isinstance(spec, Fixed):
        return f"fixed value {spec.value!r}"
    if isinstance(spec, (list, Choices)):
        return f"choices {list(getattr(spec, 'choices', spec))}"
    if isinstance(spec, AutoBatch):
        return f"auto (the largest batch that fits, up to {spec.max}, a multiple of {spec.multiple_of})"
    step = "" if spec.step in (None, 1) else f" in steps of {spec.step}"
    return f"range {spec.low}..{spec.high}{' (log)' if spec.log else ''}{step}"
