"""Read configs exported in format 1 (hpo 0.1's `training:` layout) as today's search-space file.

Format 1 held a trial's fixed values in its own layout; format 2 is a search-space file with every
value fixed. `upgrade` moves each value to its place in format 2, and `where` gives an error's key
path back in the user's format-1 spelling.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from hpo.errors import UserInputError

__all__ = ["FORMAT_1", "upgrade"]

FORMAT_1 = 1

# format-2 key path -> format-1 key path, for the values that moved. params.<name> came from training.
_MOVED = {
    "workload.max_steps": "training.max_steps",
    "workload.eval_every": "training.eval_every",
    "systems.compile_backend": "training.compile_backend",
    "systems.device": "device",
    "study.seed": "seed",
    "study.objectives": "objectives",
    "study.directions": "directions",
    "study.skip_slow": "verification.skip_slow",
    "study.slow_ratio": "verification.slow_ratio",
}
_TOP_LEVEL = {
    "format",
    "hpo_version",
    "workload",
    "training",
    "systems",
    "seed",
    "objectives",
    "directions",
    "device",
    "verification",
}


def upgrade(raw: dict[str, Any]) -> tuple[dict[str, Any], Callable[[str], str]]:
    """The format-2 search-space dict of a format-1 config, and a key-path translator for errors."""
    unknown = sorted(set(raw) - _TOP_LEVEL)
    if unknown:
        raise UserInputError(f"{unknown[0]}: unknown key in a format-1 config (remove it or check its spelling)")
    training = _mapping(raw, "training")
    workload = _mapping(raw, "workload")
    verification = _mapping(raw, "verification")
    systems = _mapping(raw, "systems")
    for key in ("max_steps", "eval_every"):
        _move(training, key, workload)
    _move(training, "compile_backend", systems)
    _move(raw, "device", systems)
    study = _study_section(raw, verification)
    _check_fixed(training, systems)
    version = {"hpo_version": raw["hpo_version"]} if "hpo_version" in raw else {}
    upgraded = {"format": 2, **version, "study": study, "workload": workload, "params": training, "systems": systems}
    return upgraded, _format1_path


def _study_section(raw: dict[str, Any], verification: dict[str, Any]) -> dict[str, Any]:
    """Format 2's `study`: format 1's top-level seed, objectives and directions, and its `verification`."""
    study = {key: raw[key] for key in ("seed", "objectives", "directions") if key in raw}
    unknown = sorted(set(verification) - {"skip_slow", "slow_ratio"})
    if unknown:
        raise UserInputError(f"verification.{unknown[0]}: unknown key (remove it or check its spelling)")
    return {**study, **verification}


def _check_fixed(training: dict[str, Any], systems: dict[str, Any]) -> None:
    """Format 1 fixed every value: a mapping or a list there is an error, not a searched value."""
    for path, value in {
        **{f"training.{k}": v for k, v in training.items()},
        **{f"systems.{k}": v for k, v in systems.items()},
    }.items():
        if isinstance(value, (dict, list)):
            raise UserInputError(f"{path}: a format-1 config holds one fixed value per key, got {value!r}")


def _mapping(raw: dict[str, Any], key: str) -> dict[str, Any]:
    value = raw.get(key, {})
    if not isinstance(value, dict):
        raise UserInputError(f"{key}: must be a mapping in a format-1 config, got {value!r}")
    return dict(value)


def _move(source: dict[str, Any], key: str, target: dict[str, Any]) -> None:
    if key in source:
        target[key] = source.pop(key)


def _format1_path(path: str) -> str:
    for new, old in _MOVED.items():
        if path == new or path.startswith(new + "."):
            return old + path[len(new) :]
    if path.startswith("params."):
        return "training." + path[len("params.") :]
    return path
