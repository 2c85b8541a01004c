"""One config on every rank: rank 0's config reaches every rank in one collective, and a rank
whose own config hashes differently ends the trial `mismatch: rank r ...` before any step, so no
rank ever trains apart (transformers#18609, optuna-integration#59)."""

from __future__ import annotations

import hashlib
import json
from typing import Any

import torch.distributed as dist

__all__ = ["ConfigMismatch", "agree_on_config", "config_hash", "differences"]

# Written by hpo, not chosen by the user: two ranks of different hpo builds still run one config.
_IGNORED = ("hpo_version",)


class ConfigMismatch(RuntimeError):
    """A rank would run another config than rank 0's."""


def config_hash(config: dict[str, Any]) -> str:
    """A short stable digest of a config dict (key order and hpo's version left out)."""
    kept = {k: v for k, v in config.items() if k not in _IGNORED}
    text = json.dumps(kept, sort_keys=True, default=repr)
    return hashlib.sha256(text.encode()).hexdigest()[:12]


def differences(ours: dict[str, Any], theirs: dict[str, Any], prefix: str = "") -> list[str]:
    """Key paths whose values differ, as `path ours against theirs`."""
    found = []
    for key in sorted(set(ours) | set(theirs)):
        a, b, path = ours.get(key), theirs.get(key), f"{prefix}{key}"
        if isinstance(a, dict) and isinstance(b, dict):
            found += differences(a, b, f"{path}.")
        elif a != b and key not in _IGNORED:
            found.append(f"{path} {a!r} against rank 0's {b!r}")
    return found


def agree_on_config(own: dict[str, Any], rank: int, world: int) -> dict[str, Any]:
    """Rank 0's config, which every rank then runs, after checking each rank's own against it;
    raises ConfigMismatch on every rank when one differs (every rank then ends, none trains)."""
    gathered: list[Any] = [None] * world
    dist.all_gather_object(gathered, (config_hash(own), own))
    root_hash, root = gathered[0]
    for other, (their_hash, theirs) in enumerate(gathered):
        if their_hash != root_hash:
            what = "; ".join(differences(theirs, root)) or "a config that hashes differently"
            raise ConfigMismatch(f"rank {other} would run config {their_hash}, rank 0 runs {root_hash}: {what}")
    return root
