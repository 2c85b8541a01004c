"""A workload's options dataclass from the values of a YAML file, each checked against its field's
annotation before the dataclass runs: the one type check every workload's `Options` get, built-in or
the user's own, so a wrong type is one line naming the key path, the type and the value.

YAML gives bool, int, float, str, null, lists and mappings. A bool is not a number (YAML reads `yes`
and `true` as one); an int is a float; a list stands for a tuple (stored as one, so the options stay
hashable) and a mapping for a nested dataclass, built the same way under its own key path.
"""

from __future__ import annotations

import collections.abc
import dataclasses
import enum
import functools
import sys
import types
import typing
from pathlib import PurePath
from typing import Any, Literal, Union

from hpo.errors import UserInputError

__all__ = ["build_dataclass", "check_field", "describe", "looks_numeric"]

_SEQUENCES = (list, tuple, collections.abc.Sequence)
_MAPPINGS = (dict, collections.abc.Mapping)


class _Mismatch(Exception):
    def __init__(self, path: str, annotation: Any, value: Any):
        super().__init__(path)
        self.path, self.annotation, self.value = path, annotation, value


def build_dataclass(cls: type, raw: Any, where: str) -> Any:
    """`cls(**raw)` once every key is known, present if required, and of its field's type; a
    UserInputError naming `where.<key>` otherwise. The dataclass's own checks (`__post_init__`) run
    last, and their message is said after `where`."""
    if not isinstance(raw, collections.abc.Mapping):
        raise UserInputError(f"{where}: expected a mapping of {cls.__name__}'s options, got {raw!r} ({type(raw).__name__})")
    fields = {f.name: f for f in dataclasses.fields(cls) if f.init}
    checked = {key: check_field(cls, key, value, f"{where}.{key}") for key, value in raw.items()}
    missing = [name for name, f in fields.items() if name not in raw and _required(f)]
    if missing:
        raise UserInputError(f"{where}.{missing[0]}: required by {cls.__name__} and missing; set it under {where}")
    try:
        return cls(**checked)
    except (TypeError, ValueError) as exc:
        raise UserInputError(f"{where}: {exc}") from None


def check_field(cls: type, name: str, value: Any, path: str) -> Any:
    """`value` as field `name` of dataclass `cls` holds it, or a UserInputError naming `path`."""
    types_ = field_types(cls)
    if name not in types_:
        raise UserInputError(f"{path}: unknown option for this workload; known options: {sorted(types_)}")
    annotation = types_[name]
    try:
        return _convert(annotation, value, path)
    except _Mismatch as bad:
        raise UserInputError(_message(bad, _default(cls, name) if bad.path == path else None)) from None


@functools.cache
def field_types(cls: type) -> dict[str, Any]:
    """Each init field's annotation, resolved; one that cannot be (a name imported only for type
    checkers) is Any, and is not checked."""
    try:
        hints = typing.get_type_hints(cls)
    except Exception:  # noqa: BLE001 - any unresolvable annotation: resolve field by field below
        hints = _hints_one_by_one(cls)
    return {f.name: hints.get(f.name, Any) for f in dataclasses.fields(cls) if f.init}


def _hints_one_by_one(cls: type) -> dict[str, Any]:
    hints: dict[str, Any] = {}
    for klass in reversed(cls.__mro__):
        scope = vars(sys.modules.get(klass.__module__, types.ModuleType("_")))
        for name, annotation in vars(klass).get("__annotations__", {}).items():
            try:
                hints[name] = eval(annotation, scope) if isinstance(annotation, str) else annotation
            except Exception:  # noqa: BLE001 - what cannot be resolved is not checked
                hints[name] = Any
    return hints


def _convert(annotation: Any, value: Any, path: str) -> Any:
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if annotation is Any or annotation is object or isinstance(annotation, typing.TypeVar):
        return value
    if origin is Literal:
        return _convert_literal(annotation, args, value, path)
    if origin is Union or origin is types.UnionType:
        return _convert_union(annotation, args, value, path)
    if origin in _SEQUENCES or annotation in _SEQUENCES:
        return _convert_sequence(annotation, origin or annotation, args, value, path)
    if origin in _MAPPINGS or annotation in _MAPPINGS:
        return _convert_mapping(annotation, args, value, path)
    if annotation is None or annotation is type(None):
        if value is None:
            return value
        raise _Mismatch(path, annotation, value)
    return _convert_class(annotation, value, path)


def _convert_literal(annotation: Any, args: tuple, value: Any, path: str) -> Any:
    """One of the Literal's values, of its type too: `True` is not `1`."""
    if any(value == a and type(value) is type(a) for a in args):
        return value
    raise _Mismatch(path, annotation, value)


def _convert_mapping(annotation: Any, args: tuple, value: Any, path: str) -> dict:
    """A dict whose keys and values each match the mapping's key and value types."""
    if not isinstance(value, dict):
        raise _Mismatch(path, annotation, value)
    key_type, value_type = args or (Any, Any)
    for key in value:
        _convert(key_type, key, f"{path}.{key}")
    return {key: _convert(value_type, item, f"{path}.{key}") for key, item in value.items()}


def _convert_union(annotation: Any, args: tuple, value: Any, path: str) -> Any:
    members = [a for a in args if a is not type(None)]
    if value is None and len(members) < len(args):
        return None
    if len(members) == 1:  # an Optional: a wrong value inside it is named at its own path
        try:
            return _convert(members[0], value, path)
        except _Mismatch as bad:
            raise (_Mismatch(path, annotation, value) if bad.path == path else bad) from None
    for member in members:
        try:
            return _convert(member, value, path)
        except (_Mismatch, UserInputError):
            continue
    raise _Mismatch(path, annotation, value)


def _convert_sequence(annotation: Any, origin: Any, args: tuple, value: Any, path: str) -> Any:
    if not isinstance(value, (list, tuple)):
        raise _Mismatch(path, annotation, value)
    if origin is tuple and args and args[-1] is not Ellipsis:
        if len(value) != len(args):
            raise _Mismatch(path, annotation, value)
        items = args
    else:
        items = (args[0] if args else Any,) * len(value)
    converted = [_convert(item, v, f"{path}[{i}]") for i, (item, v) in enumerate(zip(items, value, strict=True))]
    return converted if origin is list else tuple(converted)


def _convert_class(annotation: Any, value: Any, path: str) -> Any:
    if not isinstance(annotation, type):  # a form this check does not read (Callable[...], a set...)
        return value
    if annotation is float:
        ok = isinstance(value, (int, float)) and not isinstance(value, bool)
    elif annotation is int:
        ok = isinstance(value, int) and not isinstance(value, bool)
    elif dataclasses.is_dataclass(annotation):
        return value if isinstance(value, annotation) else build_dataclass(annotation, value, path)
    elif issubclass(annotation, enum.Enum):
        return _enum_member(annotation, value, path)
    elif issubclass(annotation, PurePath) and isinstance(value, str):
        return annotation(value)
    else:
        ok = isinstance(value, annotation)
    if not ok:
        raise _Mismatch(path, annotation, value)
    return value


def _enum_member(annotation: type[enum.Enum], value: Any, path: str) -> enum.Enum:
    if isinstance(value, annotation):
        return value
    for member in annotation:
        if value == member.value or value == member.name:
            return member
    raise _Mismatch(path, annotation, value)


def describe(annotation: Any) -> str:
    """A type in the words of a YAML file: `int or null`, `one of ['minilm', 'tiny']`, `a list of int`."""
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if annotation is None or annotation is type(None):
        return "null"
    if origin is Literal:
        return f"one of {list(args)}"
    if origin is Union or origin is types.UnionType:
        return " or ".join(describe(a) for a in args)
    if origin is tuple and args and args[-1] is not Ellipsis:
        return f"a list of {len(args)} ({', '.join(describe(a) for a in args)})"
    if origin in _SEQUENCES or annotation in _SEQUENCES:
        return f"a list of {describe(args[0])}" if args else "a list"
    if origin in _MAPPINGS or annotation in _MAPPINGS:
        return f"a mapping of {describe(args[0])} to {describe(args[1])}" if args else "a mapping"
    if annotation is Any:
        return "any value"
    if dataclasses.is_dataclass(annotation):
        return f"a mapping of {annotation.__name__}'s options"
    if isinstance(annotation, type) and issubclass(annotation, enum.Enum):
        return f"one of {[m.value for m in annotation]}"
    return getattr(annotation, "__name__", str(annotation))


def _message(bad: _Mismatch, default: Any) -> str:
    value = bad.value
    note = ""
    if isinstance(value, bool) and _numeric(bad.annotation):
        note = ": a bool is not a number"
    elif isinstance(value, str) and _numeric(bad.annotation) and looks_numeric(value):
        note = f": YAML reads {value} as text; write a number with a dot, such as 1.0e-3"
    fix = f"; the default is {default!r}" if default is not None else ""
    return f"{bad.path}: expected {describe(bad.annotation)}, got {value!r} ({type(value).__name__}){note}{fix}"


def _numeric(annotation: Any) -> bool:
    return any(t in (int, float) for t in (annotation, *typing.get_args(annotation)))


def looks_numeric(text: str) -> bool:
    """Whether YAML text reads as a number to Python (`1e-3`, which YAML 1.1 leaves a string)."""
    try:
        float(text)
    except ValueError:
        return False
    return True


def _required(field: dataclasses.Field) -> bool:
    return field.default is dataclasses.MISSING and field.default_factory is dataclasses.MISSING


def _default(cls: type, name: str) -> Any:
    field = next(f for f in dataclasses.fields(cls) if f.name == name)
    return None if field.default is dataclasses.MISSING else field.default
