"""One config on every rank: rank 0's config reaches every rank in one collective, and a rank
whose own config hashes differently ends the trial `mismatch: rank r ...` before any step, so no
rank ever trains apart (transformers#18609, optuna-integration#59). Any other verdict the ranks
reach together (`gathered`, then `AgreedVerdict` raised on every rank) ends them alike: a rank that
ended alone would leave its peers waiting in their next collective until the group's timeout."""

from __future__ import annotations

import hashlib
import json
from typing import Any

import torch.distributed as dist

from hpo.errors import TrialRejected
from hpo.verdicts import Verdict

__all__ = ["AgreedVerdict", "ConfigMismatch", "agree_on_config", "config_hash", "differences", "gathered"]

# Written by hpo, not chosen by the user: two ranks of different hpo builds still run one config.
_IGNORED = ("hpo_version",)


class ConfigMismatch(RuntimeError):
    """A rank would run another config than rank 0's."""


class AgreedVerdict(TrialRejected):
    """A verdict every rank of the group reached from the same gathered facts, so each raises it
    and none goes on to train; its detail names the rank it is about, not the rank that raised it.
    `kept` is what the trial records with it: the failing rank's traceback, rank 0's observed
    knobs, the probe's seconds."""

    def __init__(self, verdict: Verdict, kept: dict[str, Any] | None = None):
        self.kept = kept or {}
        super().__init__(verdict, self.kept.get("knobs_observed"))


def gathered(own: Any, world: int) -> list[Any]:
    """Every rank's `own`, by rank, on every rank (one collective); this rank's alone with no group."""
    if world == 1:
        return [own]
    every: list[Any] = [None] * world
    dist.all_gather_object(every, own)
    return every


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
