"""hpo's library logger, as Optuna's `optuna/logging.py` does it: one root logger named "hpo", a
`get_logger(__name__)` per module, and a default stderr handler added once, under a lock. Library code
never prints; the CLI chooses the verbosity (`-v`, `-q`). An application embedding hpo can silence it
(`set_verbosity(logging.WARNING)`), route it (`disable_default_handler()` and its own handler) or
send it up to its own root logger (`enable_propagation()`).

The progress display and the commands' result lines are not logging: they are what was asked for.
"""

from __future__ import annotations

import logging
import sys
import threading

__all__ = ["disable_default_handler", "enable_propagation", "get_logger", "set_verbosity"]

ROOT = "hpo"
_lock = threading.Lock()
_default_handler: logging.Handler | None = None


def _root() -> logging.Logger:
    return logging.getLogger(ROOT)


def _configure() -> None:
    global _default_handler
    with _lock:
        if _default_handler is not None:
            return
        # A stream that looks sys.stderr up at each write: pytest and callers may swap it.
        _default_handler = logging.StreamHandler(_StderrNow())
        _default_handler.setFormatter(logging.Formatter("%(message)s"))  # the lines hpo has always printed
        root = _root()
        root.addHandler(_default_handler)
        root.setLevel(logging.INFO)
        root.propagate = False


class _StderrNow:
    def write(self, text: str) -> int:
        return sys.stderr.write(text)

    def flush(self) -> None:
        sys.stderr.flush()


def get_logger(name: str) -> logging.Logger:
    """The logger of an hpo module (`get_logger(__name__)`), below the "hpo" root."""
    _configure()
    return logging.getLogger(name)


def set_verbosity(level: int) -> None:
    _configure()
    _root().setLevel(level)


def disable_default_handler() -> None:
    _configure()
    _root().removeHandler(_default_handler)


def enable_propagation() -> None:
    _configure()
    _root().propagate = True
