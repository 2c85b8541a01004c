"""Storage URLs: the default SQLite location, and masking so a password never reaches output."""

from __future__ import annotations

import re
from pathlib import Path

_PASSWORD = re.compile(r"(?P<head>[a-zA-Z][a-zA-Z0-9+.-]*://[^:/@\s]*:)(?P<password>[^@\s]*)(?P<tail>@)")


def default_storage(study_name: str, root: Path | str = "studies") -> str:
    safe = re.sub(r"[^A-Za-z0-9_.-]", "_", study_name)
    return f"sqlite:///{Path(root) / safe}.db"


def mask_password(text: str) -> str:
    """Replace the password of every URL in `text` with ***."""
    return _PASSWORD.sub(lambda m: f"{m['head']}***{m['tail']}", text)


def ensure_sqlite_folder(url: str) -> None:
    if url.startswith("sqlite:///") and not url.startswith("sqlite:///:memory:"):
        Path(url.removeprefix("sqlite:///")).parent.mkdir(parents=True, exist_ok=True)
