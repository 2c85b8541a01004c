"""Exceptions that carry their own exit code and a one-line message.

`UserInputError` is anything the user can fix by editing a file or a flag: the CLI prints it
on one line and exits 2 (`ExitCode.BAD_INPUT`) without touching the storage. `KnobUnavailable` and `TrialRejected`
are verdicts about a trial: they are recorded on the trial, never printed as warnings.
"""

from __future__ import annotations

import sysconfig
import traceback
from collections.abc import Iterable, Iterator
from enum import IntEnum
from typing import Any

from hpo.masking import mask_secrets
from hpo.verdicts import Kind, Verdict


class ExitCode(IntEnum):
    """What `hpo` exits with: each code has one meaning, whatever the command (`EXIT_CODES` says it)."""

    OK = 0
    NO_TRIAL_TRAINED = 1
    BAD_INPUT = 2
    STORAGE_UNREACHABLE = 3
    NO_KNOBS_RUN_HERE = 4
    WORKER_FAILED = 5
    INTERNAL_ERROR = 70  # sysexits.h's EX_SOFTWARE: a bug, never a verdict on the user's input
    INTERRUPTED = 130  # 128 + SIGINT, what a shell reports for Ctrl-C
    TERMINATED = 143  # 128 + SIGTERM, how Slurm and Kubernetes stop a job


# The one table of exit codes: the docs render it, the CLI returns its codes, tests provoke each one.
EXIT_CODES: dict[ExitCode, str] = {
    ExitCode.OK: "success: `hpo run` trained at least one trial normally (others may have been rejected, pruned "
    "or have failed); `hpo probe` found at least one knob combination that runs",
    ExitCode.NO_TRIAL_TRAINED: "no trial trained normally: every trial of `hpo run` was rejected, pruned, "
    "diverged or failed, or produced the worst value (a target never reached), or the config of `hpo train` "
    "did not train normally",
    ExitCode.BAD_INPUT: "bad input (a file, a key, a flag, a study name): one line on stderr, nothing written",
    ExitCode.STORAGE_UNREACHABLE: "the storage is unreachable or failed: its server refused, could not be "
    "resolved or timed out, at start or during the run (retry later)",
    ExitCode.NO_KNOBS_RUN_HERE: "no knob combination can run here: `hpo probe` found none ok, `hpo run` or "
    "`hpo worker` found, before its first trial, no combination whose values all run on this machine, or the "
    "opening sweep of `study.strategy: probe_first` verified none (one line per rejected value)",
    ExitCode.WORKER_FAILED: "a worker failed: `hpo worker`'s trial processes kept dying before their trial "
    "started, or a local worker process of `hpo run` exited non-zero",
    ExitCode.INTERNAL_ERROR: "an error in hpo itself (a bug): the traceback is on stderr; please report it",
    ExitCode.INTERRUPTED: "interrupted (Ctrl-C); `hpo worker` or `hpo run` as for SIGTERM: its trial process is "
    "killed, the trial failed (`interrupted`) and queued for a retry, its reference folder removed",
    ExitCode.TERMINATED: "`hpo worker` or `hpo run` stopped by SIGTERM: its trial process is killed, the trial "
    "failed (`terminated`) and queued for a retry, its reference folder removed",
}


def exit_code_table() -> str:
    """`EXIT_CODES` as a Markdown table, for the docs."""
    rows = [f"| {int(code)} | `{code.name.lower()}` | {meaning} |" for code, meaning in EXIT_CODES.items()]
    return "\n".join(["| exit | name | meaning |", "| --- | --- | --- |", *rows])


class HpoError(Exception):
    """Base class for hpo's own errors."""


class UserInputError(HpoError):
    """Bad input the user can fix: a file, a key, a flag, a storage URL."""

    exit_code = ExitCode.BAD_INPUT


class NoKnobsRunHere(HpoError):
    """No knob combination is left to run (exit 4): `headline` says why, the message one line per
    value that cannot run (`hpo.runtime.NothingRunsHere`: on this machine; `hpo.strategy.NothingVerified`:
    probe_first's opening sweep verified none)."""

    exit_code = ExitCode.NO_KNOBS_RUN_HERE
    headline = "no knob combination is left to run"


class StorageUnreachable(UserInputError):
    """The storage's server did not answer (refused, unresolvable, timed out): exit 3, so a cluster
    script can tell "retry later" from "fix the command"."""

    exit_code = ExitCode.STORAGE_UNREACHABLE


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
    """The study's pruner stopped the trial at its report step `step`; not a failure of the knobs.
    Under a time budget the report step is milliseconds of training (`in_ms`), and `where` says so."""

    def __init__(self, step: int, in_ms: bool = False):
        self.step, self.where = step, f"at {step} ms of training" if in_ms else f"step {step}"
        super().__init__(f"pruned: {self.where}")


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
    """`error: Type: first line` of the real cause (an op's error, not the first line of
    torch.compile's wrapper around it), masked (the message may quote a URL) before it is cut to
    300 characters: a cut between a password and its '@' would leave the password unmasked."""
    exc = real_cause(exc)
    first = mask_secrets((str(exc).strip().splitlines() or [""])[0])[:300]
    return Verdict(Kind.ERROR, f"{type(exc).__name__}: {first}".rstrip(": "))


# Where an installed library's code lives (the standard library's, site-packages'): an error's place
# is the innermost frame outside them, in hpo or the user's workload.
_LIBRARY_DIRS = tuple({sysconfig.get_paths()[k] for k in ("stdlib", "platstdlib", "purelib", "platlib")})


def error_signature(exc: BaseException) -> str:
    """What makes two errors the same error: type, message (its first line) and place, the
    innermost frame in hpo or the workload as `module:function`. No line number: a retry in an
    upgraded or edited checkout must still read as the same error (and a library's innermost frame
    would name torch's dispatcher, not what called it)."""
    place, tb = "?", exc.__traceback__
    while tb is not None:
        frame = tb.tb_frame
        module = str(frame.f_globals.get("__name__", "?"))
        filename = frame.f_code.co_filename
        if module.split(".")[0] == "hpo" or not (filename.startswith("<") or filename.startswith(_LIBRARY_DIRS)):
            place = f"{module}:{frame.f_code.co_qualname}"
        tb = tb.tb_next
    return f"{error_verdict(exc).detail} @ {place}"


def short_traceback(exc: BaseException) -> str:
    """The traceback's last TRACEBACK_CHARS characters, masked before the cut."""
    text = mask_secrets("".join(traceback.format_exception(exc)))
    return text if len(text) <= TRACEBACK_CHARS else "...\n" + text[-TRACEBACK_CHARS:]


# torch.compile's exceptions all derive from this class (torch/_dynamo/exc.py, torch 2.13 and 2.14),
# matched by name so that this module imports no torch. An op that raises while Dynamo traces it with
# fake tensors surfaces as TorchRuntimeError "RuntimeError when making fake tensor call". torch 2.13.0
# raises it `from None` over an Unsupported whose __cause__ is the op's own error (torch/_dynamo/utils.py,
# `_wrap_graph_break_with_torch_runtime_err`). torch 2.14.1 (`get_fake_value`, `run_node` and
# `exception_handler` in symbolic_convert.py) first wraps the op's error in a plain RuntimeError
# "Dynamo failed to run FX node with fake tensors: ..." (`from` the op's error), raises an
# ObservedRuntimeError while handling it (so it is that one's __context__, not suppressed), then
# FakeTensorObservedException and TorchRuntimeError, each `from None`. BackendCompilerFailed keeps its
# cause as `inner_exception`.
DYNAMO_BASE = "TorchDynamoException"
FAKE_TENSOR_WRAPPER = "Dynamo failed to run FX node with fake tensors"


def is_dynamo_wrapper(exc: BaseException) -> bool:
    if DYNAMO_BASE in {cls.__name__ for cls in type(exc).__mro__}:
        return True
    return type(exc) is RuntimeError and exc.__cause__ is not None and str(exc).startswith(FAKE_TENSOR_WRAPPER)


def exception_chain(exc: BaseException) -> Iterator[BaseException]:
    """The exception, then what it wraps (dynamo's `inner_exception`, `__cause__`, and the context
    Dynamo hides with `raise ... from None` or keeps by raising in an `except`), outermost first."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        yield current
        hidden = current.__context__ if is_dynamo_wrapper(current) else None
        current = getattr(current, "inner_exception", None) or current.__cause__ or hidden


def real_cause(exc: BaseException) -> BaseException:
    """The error under torch.compile's wrappers (the op that refused while traced, the backend's
    own failure), or `exc` itself when it wraps nothing: what a failure's message should say."""
    return next((e for e in exception_chain(exc) if not is_dynamo_wrapper(e)), exc)
