"""Write a search space (or an exported config) as the YAML file `hpo` reads. One helper for the
tests that each kept their own writer."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import yaml

__all__ = ["write_space"]


def write_space(path: Path, space: Mapping, *, sort_keys: bool = True) -> Path:
    """Write `space` to `path` as YAML and return `path`. `sort_keys=False` keeps the mapping's own
    key order, for a test that reads the file's lines back."""
    path.write_text(yaml.safe_dump(space, sort_keys=sort_keys))
    return path
