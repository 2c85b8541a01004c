"""The user's own files for the Hugging Face workloads, checked without torch: data files read with
`datasets` (the checkpoint is hpo.workloads.options.hf_models'). `hpo validate` runs these checks through the options'
`__post_init__`, so a missing column, an empty file or a label set that differs between the two
files is refused (exit 2) before any trial, with one line naming the file and the value."""

from __future__ import annotations

import functools
from collections.abc import Sequence
from pathlib import Path
from typing import Any

__all__ = ["BUILDERS", "check_columns", "check_overrides", "read_table", "sorted_labels"]

# File suffix -> the `datasets` packaged builder that reads it.
BUILDERS: dict[str, str] = {
    ".csv": "csv",
    ".json": "json",
    ".jsonl": "json",
    ".parquet": "parquet",
    ".txt": "text",
    ".text": "text",
}
TEXT_SUFFIXES = (".txt", ".text")


def builder_for(key: str, value: str, allowed: Sequence[str]) -> str:
    suffix = Path(value).suffix.lower()
    if suffix not in BUILDERS or BUILDERS[suffix] not in allowed:
        ok = sorted(s for s, b in BUILDERS.items() if b in allowed)
        raise ValueError(f"{key}: {value!r} must be a file ending in one of {ok}")
    if not Path(value).expanduser().is_file():
        raise ValueError(f"{key}: {value!r} does not exist (or is not a file)")
    return BUILDERS[suffix]


def read_table(key: str, value: str, allowed: Sequence[str]) -> Any:
    """The file as a `datasets.Dataset` (one row per line of a text file); refuses an empty file."""
    builder = builder_for(key, value, allowed)
    path = Path(value).expanduser().resolve()
    stat = path.stat()
    if stat.st_size == 0:
        raise ValueError(f"{key}: {value!r} is empty")
    try:
        table = _read(str(path), builder, stat.st_size, stat.st_mtime_ns)
    except _Unreadable as exc:
        if "corresponds to no data" in str(exc):  # datasets' words for a file with a header and no rows
            raise ValueError(f"{key}: {value!r} holds no rows") from None
        raise ValueError(f"{key}: {value!r}: {exc}") from None
    if table.num_rows == 0:
        raise ValueError(f"{key}: {value!r} holds no rows")
    return table


@functools.lru_cache(maxsize=8)
def _read(path: str, builder: str, size: int, mtime_ns: int) -> Any:
    """Cached per (path, size, mtime): options are built more than once per process."""
    import datasets

    datasets.disable_progress_bars()
    kwargs = {"sample_by": "document"} if builder == "text" else {}
    try:
        return datasets.load_dataset(builder, data_files={"data": path}, split="data", **kwargs)
    except Exception as exc:  # noqa: BLE001 - any parse error is the user's file; said in one line
        raise _Unreadable(f"cannot be read as {builder}: {type(exc).__name__}: {exc}") from None


class _Unreadable(Exception):
    pass


def check_columns(key: str, value: str, table: Any, columns: dict[str, str | None]) -> None:
    """Every named column (option name -> column) must be in the file."""
    for option, column in columns.items():
        if column is not None and column not in table.column_names:
            raise ValueError(f"{option}: column {column!r} is not in {key} {value!r}, which has columns {table.column_names}")


def check_overrides(value: Any) -> tuple[tuple[str, Any], ...] | None:
    """config_overrides as sorted (key, value) pairs, so the options stay hashable."""
    if value is None:
        return None
    if isinstance(value, tuple):
        value = dict(value)
    if not isinstance(value, dict) or not all(isinstance(k, str) for k in value):
        raise ValueError(f"config_overrides: must be a mapping of config attribute to value, but got {value!r}")
    return tuple(sorted(value.items()))


def sorted_labels(values: Sequence[Any]) -> tuple[Any, ...]:
    """The distinct labels in a stable order: numbers numerically, anything else as strings."""
    distinct = set(values)
    if None in distinct:
        raise ValueError("some rows have no label")
    if all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in distinct):
        return tuple(sorted(distinct))
    return tuple(sorted(distinct, key=str))
