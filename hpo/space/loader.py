"""Read and validate a search-space file into a `SearchSpace`. Every problem becomes a
UserInputError naming the file, the key path, the rule and the value."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pydantic
import yaml

from hpo.config import TRAINING_KEYS
from hpo.errors import UserInputError
from hpo.space.params import ParamSpec, parse_param
from hpo.space.schema import SpaceFile
from hpo.workloads.registry import metrics_of, parse_options

WORKLOAD_TRAINING_KEYS = ("max_steps", "eval_every")


@dataclass(frozen=True)
class SearchSpace:
    source: str
    raw: dict
    spec: SpaceFile
    params: dict[str, ParamSpec]
    systems: dict[str, list]

    @property
    def study(self):
        return self.spec.study

    def workload_options(self) -> dict[str, Any]:
        """The workload's own options from the file (its name and training lengths removed)."""
        return dict(self.spec.workload.model_extra or {})

    def fingerprint(self) -> dict[str, Any]:
        """What makes two files the same study: a resumed study must not change its space."""
        return {
            "workload": self.spec.workload.model_dump(),
            "params": {k: repr(v) for k, v in sorted(self.params.items())},
            "systems": self.systems,
            "compile_backend": self.spec.systems.compile_backend,
            "objectives": self.study.objectives,
            "directions": self.study.directions,
        }


def load_space(path: str | Path) -> SearchSpace:
    return parse_space(_read_yaml(Path(path)), source=str(path))


def parse_space(raw: dict, source: str) -> SearchSpace:
    """Validate an already-read space (from a file, or stored in a study for its workers)."""
    path = source
    try:
        spec = SpaceFile.model_validate(raw)
    except pydantic.ValidationError as exc:
        raise UserInputError(f"{path}: {_first_error(exc)}") from None
    try:
        params = {name: parse_param(f"params.{name}", value) for name, value in spec.params.items()}
        _check_workload(spec, params)
    except UserInputError as exc:
        raise UserInputError(f"{path}: {exc}") from None
    return SearchSpace(source=source, raw=raw, spec=spec, params=params, systems=spec.systems.choices())


def _read_yaml(path: Path) -> dict:
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
        raise UserInputError(f"{path}: the top level must be a mapping with study/workload/params/systems, got {type(data).__name__}")
    return data


def _first_error(exc: pydantic.ValidationError) -> str:
    """One line for the first bad key. A union (scalar or list) fails once per branch; the branch
    that names the allowed values says the most, so it wins."""
    errors = exc.errors()
    paths = {_path(e) for e in errors}
    first = min(errors, key=lambda e: (e["type"] != "literal_error", e["type"] == "list_type"))
    message = first["msg"].removeprefix("Value error, ")
    if first["type"] == "extra_forbidden":
        message = "unknown key (remove it or check its spelling)"
    value = first.get("input")
    shown = "" if first["type"] in ("extra_forbidden", "missing") else f", got {value!r}"
    more = f" (and {len(paths) - 1} more)" if len(paths) > 1 else ""
    return f"{_path(first)}: {message}{shown}{more}"


def _path(error: dict) -> str:
    # Drop pydantic's union-branch labels such as "list[literal['fp32','bf16']]".
    parts = [str(p) for p in error["loc"] if not (isinstance(p, str) and ("[" in p or p in ("bool", "str", "int")))]
    return ".".join(parts)


def _check_workload(spec: SpaceFile, params: dict[str, ParamSpec]) -> None:
    name = spec.workload.name
    options = dict(spec.workload.model_extra or {})
    workload_params = {k: v for k, v in params.items() if k not in TRAINING_KEYS}
    # Searched workload options are validated with their first candidate value.
    probe_values = {k: _example(v) for k, v in workload_params.items()}
    parse_options(name, {**options, **probe_values})
    known = metrics_of(name)
    unknown = [m for m in spec.study.objectives if known and m not in known]
    if unknown:
        raise UserInputError(f"study.objectives: workload {name!r} reports {list(known)}, got {unknown}")


def _example(spec: ParamSpec) -> Any:
    for attr in ("value", "low"):
        if hasattr(spec, attr):
            return getattr(spec, attr)
    return spec.choices[0]
