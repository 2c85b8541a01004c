"""Exceptions that carry their own exit code and a one-line message.

`UserInputError` is anything the user can fix by editing a file or a flag: the CLI prints it
on one line and exits 2 without touching the storage. `KnobUnavailable` and `TrialRejected`
are verdicts about a trial: they are recorded on the trial, never printed as warnings.
"""

from __future__ import annotations

import traceback
from collections.abc import Iterable
from typing import Any

from hpo.verdicts import Kind, Verdict


class HpoError(Exception):
    """Base class for hpo's own errors."""


class UserInputError(HpoError):
    """Bad input the user can fix: a file, a key, a flag, a storage URL."""

    exit_code = 2


class StorageUnreachable(UserInputError):
    """The storage's server did not answer (refused, unresolvable, timed out): exit 3, so a cluster
    script can tell "retry later" from "fix the command"."""

    exit_code = 3


class KnobUnavailable(HpoError):
    """A systems knob cannot run on this hardware or software stack (an `incompatible` verdict).

    `detail` says why for people; `implicates` names the knob values to blame, e.g.
    [("attention", "flash_attn")], so the sampler avoids exactly those."""

    def __init__(self, detail: str, implicates: Iterable[tuple[str, Any]] = ()):
        self.verdict = Verdict.make(Kind.INCOMPATIBLE, detail, implicates)
        super().__init__(str(self.verdict))


class TrialRejected(HpoError):
    """A trial stopped abnormally; `verdict` is the recorded reason (`diverged: ...`, `oom: ...`)."""

    def __init__(self, verdict: Verdict, observed: dict | None = None):
        super().__init__(str(verdict))
        self.verdict = verdict
        self.observed = observed or {}


class PrunedByPruner(HpoError):
    """The study's pruner stopped the trial at `step`; not a failure of the knobs."""

    def __init__(self, step: int):
        super().__init__(f"pruned at step {step}")
        self.step = step


class TrialError(HpoError):
    """The trial failed in a way that proves nothing about its knobs (a bug, a transient device
    error, a failure that did not repeat): not a verdict. `attrs` is what the trial recorded up to
    then, with the traceback (truncated) under `error_traceback`; the exception is the cause."""

    def __init__(self, verdict: Verdict, attrs: dict):
        super().__init__(str(verdict))
        self.verdict, self.attrs = verdict, attrs


# A trial's attrs keep the traceback's last lines: the worker's stderr has all of it.
TRACEBACK_CHARS = 4000


def error_verdict(exc: BaseException) -> Verdict:
    first = (str(exc).strip().splitlines() or [""])[0][:300]
    return Verdict(Kind.ERROR, f"{type(exc).__name__}: {first}".rstrip(": "))


def short_traceback(exc: BaseException) -> str:
    text = "".join(traceback.format_exception(exc))
    return text if len(text) <= TRACEBACK_CHARS else "...\n" + text[-TRACEBACK_CHARS:]
