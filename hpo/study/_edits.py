"""An edited search-space file run on an existing study: each changed setting is applied and named
in one line, or the run is refused (exit 2) naming it. A change is never silently ignored.

What defines the study cannot change under its trials: its objectives and directions (Optuna fixes
them at creation), the workload and its options, the params and the knobs (every recorded trial
and the sampler's distributions depend on them). How the search runs can change: the sampler, the
pruner, the budget, timeouts, the slow rule, retries, the seed and the device. Workers read those
from the study's stored space, so storing the edited space applies them to every worker (and every
trial process) that starts afterwards.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from hpo.config.schema import SpaceFile
from hpo.knobs.systems import KNOBS

__all__ = ["FIXED", "Change", "fixed_changes", "setting_changes", "space_changes"]

# Key paths (and everything under them) fixed when the study is created.
FIXED = (
    "study.objectives",
    "study.directions",
    "study.strategy",  # the sampler's distributions depend on them
    "study.keep_fastest",
    "workload",
    "params",
    # Every knob that says so in its module (the loader settings do not: how batches load searches nothing).
    *(f"systems.{name}" for name, knob in KNOBS.items() if knob.fixed_in_study),
    "systems.compile_backend",
)
# Not settings: written by `hpo export`, or the name that chose this study.
_NOT_SETTINGS = ("format", "hpo_version", "study.name")


@dataclass(frozen=True)
class Change:
    key: str  # a key path of the file, e.g. study.sampler.name
    old: Any
    new: Any

    def __str__(self) -> str:
        return f"{self.key}: {_show(self.old)} -> {_show(self.new)}"


def space_changes(stored: SpaceFile, edited: SpaceFile) -> list[Change]:
    """Every key path whose value differs, defaults filled in on both sides."""
    old, new = _flat(stored.model_dump()), _flat(edited.model_dump())
    keys = sorted(old.keys() | new.keys())
    return [Change(k, old.get(k), new.get(k)) for k in keys if old.get(k) != new.get(k) and not _under(k, _NOT_SETTINGS)]


def setting_changes(stored: SpaceFile, edited: SpaceFile) -> list[Change]:
    """The changes that may be applied to an existing study (the others are in FIXED)."""
    return [c for c in space_changes(stored, edited) if not _under(c.key, FIXED)]


def fixed_changes(stored: SpaceFile, edited: SpaceFile) -> list[Change]:
    """The changes that cannot be applied: they would make a different study."""
    return [c for c in space_changes(stored, edited) if _under(c.key, FIXED)]


def _flat(tree: dict, prefix: str = "") -> dict[str, Any]:
    flat: dict[str, Any] = {}
    for key, value in tree.items():
        path = f"{prefix}{key}"
        flat.update(_flat(value, f"{path}.") if isinstance(value, dict) and value else {path: value})
    return flat


def _under(key: str, prefixes: tuple[str, ...]) -> bool:
    return any(key == p or key.startswith(f"{p}.") for p in prefixes)


def _show(value: Any) -> str:
    return "(unset)" if value is None else str(value)
