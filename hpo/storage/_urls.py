"""Storage URLs: the default SQLite location and hpo's own pooler option. What of a URL may be shown
is `hpo.masking.mask_secrets`'s to say."""

from __future__ import annotations

import re
from pathlib import Path
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from hpo.errors import UserInputError


def default_storage(study_name: str, root: Path | str = "studies") -> str:
    safe = re.sub(r"[^A-Za-z0-9_.-]", "_", study_name)
    return f"sqlite:///{Path(root) / safe}.db"


def ensure_sqlite_folder(url: str) -> None:
    if url.startswith("sqlite:///") and not url.startswith("sqlite:///:memory:"):
        Path(url.removeprefix("sqlite:///")).parent.mkdir(parents=True, exist_ok=True)


POOLER_OPTION = "hpo_pooler"
POOLERS = ("transaction",)


def split_pooler(url: str) -> tuple[str, str | None]:
    """The URL without hpo's `hpo_pooler=transaction` option, and the option's value (None if
    absent). The option says the server is reached through a transaction pooler (PgBouncer's
    `pool_mode = transaction`); it travels with the URL to every worker and trial process."""
    parts = urlsplit(url)
    query = parse_qsl(parts.query, keep_blank_values=True)
    values = [value for key, value in query if key == POOLER_OPTION]
    if not values:
        return url, None
    if values[-1] not in POOLERS:
        raise UserInputError(f"storage option {POOLER_OPTION} must be one of {', '.join(POOLERS)}, got {values[-1]!r}")
    rest = urlencode([(key, value) for key, value in query if key != POOLER_OPTION])
    return urlunsplit(parts._replace(query=rest)), values[-1]
