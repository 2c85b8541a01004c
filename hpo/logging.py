"""hpo's library logger, as Optuna's `optuna/logging.py` does it: one root logger named "hpo", a
`get_logger(__name__)` per module, and a default stderr handler added once, under a lock. Library code
never prints, and nothing it logs shows a password, key or token: each module's logger masks every
record (`hpo.masking.mask_secrets`). The CLI chooses the verbosity (`-v`, `-q`). An application
embedding hpo can silence it (`set_verbosity(logging.WARNING)`), route it (`disable_default_handler()`
and its own handler) or send it up to its own root logger (`enable_propagation()`).

The progress display and the commands' result lines are not logging: they are what was asked for.
"""

from __future__ import annotations

import logging
import sys
import threading

from hpo.masking import mask_secrets

__all__ = ["disable_default_handler", "enable_propagation", "get_logger", "mask_library_logs", "set_verbosity"]

ROOT = "hpo"
_lock = threading.Lock()
_default_handler: logging.Handler | None = None


class _MaskSecrets(logging.Filter):
    """Masks a record's message and traceback (`mask_secrets`) on the logger that makes it, so no
    handler sees a secret: neither hpo's nor an application's after `enable_propagation()`."""

    def filter(self, record: logging.LogRecord) -> bool:
        record.msg, record.args = mask_secrets(record.getMessage()), None
        if record.exc_info and not record.exc_text:
            record.exc_text = mask_secrets(logging.Formatter().formatException(record.exc_info))
        return True


_mask_secrets = _MaskSecrets()


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
        _default_handler.addFilter(_mask_secrets)  # also a record of a module that took logging.getLogger
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
    """The logger of an hpo module (`get_logger(__name__)`), below the "hpo" root; every record it
    makes is masked (`hpo.masking`)."""
    _configure()
    logger = logging.getLogger(name)
    if _mask_secrets not in logger.filters:
        logger.addFilter(_mask_secrets)
    return logger


def mask_library_logs(*names: str) -> None:
    """Mask what the named libraries' own handlers print (Optuna logs a failed trial's traceback,
    whose message may quote a URL), and what Python's last-resort handler prints for a library that
    set up none. For a process that hpo runs: the CLI's, a trial process."""
    for handler in [logging.lastResort, *(h for name in names for h in logging.getLogger(name).handlers)]:
        if handler is not None and _mask_secrets not in handler.filters:
            handler.addFilter(_mask_secrets)


def set_verbosity(level: int) -> None:
    _configure()
    _root().setLevel(level)


def disable_default_handler() -> None:
    _configure()
    _root().removeHandler(_default_handler)


def enable_propagation() -> None:
    _configure()
    _root().propagate = True
