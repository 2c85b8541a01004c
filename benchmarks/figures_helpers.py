"""What the declarations of quoted figures share: the one-file helpers."""

from __future__ import annotations

from benchmarks.figures import Figure

__all__ = ["from_file", "key", "table"]


def from_file(file: str, date: str, places: dict[str, tuple[str, str]]) -> list[Figure]:
    """One figure per name: (where in `file`, format)."""
    return [Figure(name=name, file=file, path=path, format=fmt, date=date) for name, (path, fmt) in places.items()]


def table(prefix: str, rows_at: str, key: str, keys: tuple, columns: dict[str, str]) -> dict[str, tuple[str, str]]:
    """One figure per (row, column) of a list of rows in a result file: `prefix.row.field`."""
    return {f"{prefix}.{k}.{field}": (f"{rows_at}[{key}={k}].{field}", fmt) for k in keys for field, fmt in columns.items()}


def key(config: str) -> str:
    return config.replace("+", "_")
