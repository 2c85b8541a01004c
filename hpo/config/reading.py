"""Reading a YAML file and turning pydantic's errors into one line with the user's key path."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pydantic
import yaml

from hpo.errors import UserInputError


def read_yaml(path: Path) -> dict:
    """The file's top-level mapping, or a UserInputError naming the file and what is wrong."""
    try:
        text = path.read_text()
    except FileNotFoundError:
        raise UserInputError(f"{path}: no such file") from None
    except OSError as exc:
        raise UserInputError(f"{path}: cannot read: {exc.strerror}") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(exc, "problem", None) or "invalid YAML"
        raise UserInputError(f"{path}: malformed YAML{where}: {problem}") from None
    if not isinstance(data, dict):
        raise UserInputError(
            f"{path}: the top level must be a mapping with study/workload/params/systems, got {type(data).__name__}"
        )
    return data


def first_error(exc: pydantic.ValidationError, where: Callable[[str], str] = str) -> str:
    """One line for the first bad key, its path spelled by `where`. A union (scalar or list) fails
    once per branch; the branch that names the allowed values says the most, so it wins."""
    errors = exc.errors()
    paths = {_path(e) for e in errors}
    first = min(errors, key=lambda e: (e["type"] != "literal_error", e["type"] == "list_type"))
    message = first["msg"].removeprefix("Value error, ")
    if first["type"] == "extra_forbidden":
        message = "unknown key (remove it or check its spelling)"
    value = first.get("input")
    shown = "" if first["type"] in ("extra_forbidden", "missing") else f", got {value!r}"
    more = f" (and {len(paths) - 1} more)" if len(paths) > 1 else ""
    return f"{where(_path(first))}: {message}{shown}{more}"


def _path(error: dict) -> str:
    # Drop pydantic's union-branch labels such as "list[literal['fp32','bf16']]".
    parts = [str(p) for p in error["loc"] if not (isinstance(p, str) and ("[" in p or p in ("bool", "str", "int")))]
    return ".".join(parts)
