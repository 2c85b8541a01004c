"""Edit a nested mapping (a search space, an exported config) by key paths: `study.n_trials`, or
`study__n_trials` where the path is a Python keyword argument. One helper for the tests that each
kept their own copy."""

from __future__ import annotations

import copy
from collections.abc import Mapping

__all__ = ["edited"]


def edited(tree: Mapping, changes: Mapping[str, object], sep: str = ".") -> dict:
    """A deep copy of `tree` with each key path of `changes` (keys joined by `sep`) set to its value;
    every key but the last must exist."""
    result = copy.deepcopy(dict(tree))
    for path, value in changes.items():
        *parents, leaf = path.split(sep)
        node = result
        for key in parents:
            node = node[key]
        node[leaf] = value
    return result
