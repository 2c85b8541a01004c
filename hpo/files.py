"""Atomic file writes: a reader sees the old file or the new one, never half of one.

The text goes to a temporary file with a unique name in the same folder (so `os.replace` is a
rename within one file system, and two writers never share a temporary file), is flushed to disk,
then replaces the target in one step. If anything fails, the old file stays as it was and the
temporary file is removed. Concurrent writers of one path: the last to finish wins, whole.
"""

from __future__ import annotations

import functools
import os
import tempfile
from pathlib import Path

__all__ = ["write_atomic"]


def write_atomic(path: str | os.PathLike, text: str, encoding: str = "utf-8") -> None:
    """Write `text` to `path` atomically (see the module's docstring). Raises OSError as `open` would."""
    path = Path(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding=encoding) as out:
            out.write(text)
            out.flush()
            os.fsync(out.fileno())
        os.chmod(tmp, 0o666 & ~_umask())  # mkstemp makes 0600; a plain write would give the umask's mode
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise


@functools.cache
def _umask() -> int:
    mask = os.umask(0)  # the only way to read it, so once per process; set straight back
    os.umask(mask)
    return mask
