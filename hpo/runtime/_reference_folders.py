"""The folder of a worker whose trials run in processes of their own, for its probes' reference
steps (`hpo.verify.probing._kept_reference`; an in-process worker keeps them in memory), and the removal of
folders whose worker died without removing its own (kill -9, the OOM killer, a node lost).

The folder's name carries its owner, `hpo-reference-<host>-<pid>-<random>`, so any later worker on
the host can tell an orphan from a live worker's folder without reading anything inside it.
"""

from __future__ import annotations

import os
import shutil
import socket
import tempfile
from pathlib import Path

from hpo.config.space import SearchSpace

__all__ = ["PREFIX", "folder_path", "keeps_references", "reference_folder", "remove_folder", "remove_orphaned_folders"]

PREFIX = "hpo-reference-"


def keeps_references(space: SearchSpace) -> bool:
    """Whether a worker keeps its probes' reference steps: not when the space fixes every systems
    knob (each model is then probed once, and nothing would read them)."""
    return any(len(choices) > 1 for choices in space.systems.values())


def reference_folder(space: SearchSpace) -> tempfile.TemporaryDirectory | None:
    """The folder of a worker whose trials run in processes of their own (only another process
    reads it), removed when the worker ends; None when the worker keeps no reference."""
    if not keeps_references(space):
        return None
    return tempfile.TemporaryDirectory(prefix=f"{PREFIX}{socket.gethostname()}-{os.getpid()}-")


def folder_path(folder: tempfile.TemporaryDirectory | None) -> str | None:
    return None if folder is None else folder.name


def remove_folder(folder: tempfile.TemporaryDirectory | None) -> None:
    if folder is not None:
        folder.cleanup()


def remove_orphaned_folders(folder: str | os.PathLike | None = None) -> list[Path]:
    """Remove the reference folders in `folder` (the temp folder by default) whose owning process
    on this host is dead; return them. A folder of another host, of a live process or with no
    owner in its name (`hpo probe`'s, or an older hpo's) is kept."""
    removed = []
    host = socket.gethostname()
    for path in Path(folder or tempfile.gettempdir()).glob(f"{PREFIX}*"):
        owner = path.name.removeprefix(PREFIX).rsplit("-", 2)
        if len(owner) != 3 or owner[0] != host or not owner[1].isdigit() or _alive(int(owner[1])):
            continue
        shutil.rmtree(path, ignore_errors=True)  # another worker may be removing it too
        removed.append(path)
    return removed


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    return True
