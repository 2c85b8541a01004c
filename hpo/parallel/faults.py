"""How a group of ranks ended, as one verdict that names the rank: a rank's own exception as it
recorded it, a rank killed by a signal, a collective that timed out, or the trial's deadline."""

from __future__ import annotations

import re
import signal
from dataclasses import dataclass, field

from hpo.errors import TrialRejected
from hpo.hardware import is_out_of_memory
from hpo.parallel.agreement import AgreedVerdict, ConfigMismatch
from hpo.verdicts import Kind, Verdict

__all__ = ["AGREED", "RankExits", "agreed_error", "classify", "describe_error", "disagreement"]

# gloo and NCCL say so when a collective waited past the group's timeout.
_TIMEOUT_WORDS = ("timed out", "timeout", "watchdog caught collective operation timeout")


def describe_error(exc: BaseException) -> dict:
    """What a rank records in the store before it ends: a verdict kind and a one-line detail, and
    its memory budget's record when it failed after it (`hpo.parallel.rank_budget.carried`)."""
    memory = getattr(exc, "rank_memory", None)
    return {**_described(exc), **({"memory": memory} if memory else {})}


def _described(exc: BaseException) -> dict:
    text = " ".join(str(exc).split())[:400]
    if isinstance(exc, AgreedVerdict):  # reached by every rank alike: its detail names the rank
        verdict = exc.verdict
        implicates = verdict.implicated_record()
        return {"kind": verdict.kind.value, "detail": verdict.detail, "agreed": True, "implicates": implicates, **exc.kept}
    if isinstance(exc, ConfigMismatch):
        return {"kind": Kind.MISMATCH.value, "detail": text}
    if isinstance(exc, TrialRejected):
        return {"kind": exc.verdict.kind.value, "detail": exc.verdict.detail}
    if is_out_of_memory(exc):  # hpo's meter over study.memory_limit_gb, or an allocation its cap refused
        return {"kind": Kind.OOM.value, "detail": text}
    if any(word in text.lower() for word in _TIMEOUT_WORDS):
        return {"kind": Kind.TIMEOUT.value, "detail": text}
    return {"kind": Kind.ERROR.value, "detail": f"{type(exc).__name__}: {text}"}


@dataclass
class RankExits:
    """What the launcher saw: exit codes of the ranks that ended before it stopped the rest
    (negative: killed by that signal), each rank's recorded error and last step reported."""

    world: int
    collective_timeout_s: float
    exits: dict[int, int] = field(default_factory=dict)
    stopped: list[int] = field(default_factory=list)  # still running when the launcher stopped them
    errors: dict[int, dict] = field(default_factory=dict)
    progress: dict[int, int] = field(default_factory=dict)
    deadline_s: float | None = None  # set when the trial's deadline ended the ranks

    def last_step(self, rank: int) -> str:
        step = self.progress.get(rank)
        return "before its first step" if step is None else f"after step {step}"


def classify(seen: RankExits) -> Verdict:
    """The first that applies: a mismatch (a rank would have trained apart), a rank killed by a
    signal or exiting without a word (its peers' errors are only the echo of its death), a rank's
    recorded error (a collective timeout first), the trial's deadline. A verdict the ranks agreed
    on comes before all: every rank raised it, and it names the rank at fault itself."""
    decided = _named_by_the_ranks(seen)
    if decided is not None:
        return decided
    for rank, code in sorted(seen.exits.items()):
        if code < 0:
            name = _signal_name(-code)
            return Verdict.make(Kind.CRASHED, f"rank {rank} died (signal {name}) {seen.last_step(rank)}")
        if code != 0 and rank not in seen.errors:
            return Verdict.make(Kind.CRASHED, f"rank {rank} exited with code {code} {seen.last_step(rank)}")
    by_kind = sorted(seen.errors.items(), key=lambda item: (_echo_rank(item[1]["kind"]), item[0]))
    if by_kind and by_kind[0][1]["kind"] == Kind.TIMEOUT.value:
        return _collective_timeout(seen, *by_kind[0])
    if by_kind:
        rank, error = by_kind[0]
        return Verdict.make(Kind(error["kind"]), f"rank {rank} {seen.last_step(rank)}: {error['detail']}")
    if seen.deadline_s is not None:
        steps = ", ".join(f"rank {r} {seen.last_step(r)}" for r in sorted(seen.progress))
        return Verdict.make(Kind.TIMEOUT, f"the ranks ran past {seen.deadline_s:g} s ({steps or 'no step reported'})")
    return Verdict.make(Kind.ERROR, "the ranks ended without a result")


def _named_by_the_ranks(seen: RankExits) -> Verdict | None:
    """A verdict the ranks agreed on, else a rank's config mismatch: each names the rank at fault."""
    agreed = agreed_error(seen)
    if agreed is not None:
        return Verdict.make(Kind(agreed["kind"]), agreed["detail"], Verdict.part_from_record(agreed["implicates"]))
    for _, error in sorted(seen.errors.items()):
        if error["kind"] == Kind.MISMATCH.value:
            return Verdict.make(Kind.MISMATCH, error["detail"])
    return None


def agreed_error(seen: RankExits) -> dict | None:
    """The lowest rank's record of a verdict the ranks agreed on (every rank's is the same), if any."""
    return next((error for _, error in sorted(seen.errors.items()) if error.get("agreed")), None)


def _echo_rank(kind: str) -> int:
    """A rank's own verdict (oom, incompatible, ...) comes before a collective timeout, and that
    before a plain error: when one rank fails, its peers' errors (a closed connection, a wait) are
    the echo of its failure, whatever their rank."""
    return {Kind.TIMEOUT.value: 1, Kind.ERROR.value: 2}.get(kind, 0)


def _collective_timeout(seen: RankExits, rank: int, error: dict) -> Verdict:
    """Names the rank that waited and those that never answered: the ones still running, silent,
    when the launcher stopped them (a rank that raised on its own is not the hung one)."""
    silent = [r for r in seen.stopped if r not in seen.errors]
    blamed = "".join(f"; rank {r} ({seen.last_step(r)}) never answered" for r in silent)
    cause = re.sub(r"^\[[^\]]*\]\s*", "", error["detail"])  # gloo's source-file prefix
    return Verdict.make(
        Kind.TIMEOUT,
        f"rank {rank} waited past the {seen.collective_timeout_s:g} s collective timeout {seen.last_step(rank)}{blamed}: {cause}",
    )


# What every rank of one trial must have seen alike; a rank that saw otherwise ran something else.
AGREED = ("param_dtypes_seen", "reduce_dtypes_seen", "batch_per_rank_seen", "compiled")


def disagreement(results: list[dict]) -> Verdict | None:
    """A `mismatch` naming the first rank whose observations differ from rank 0's; None when all agree."""
    for rank, result in enumerate(results[1:], start=1):
        for key in AGREED:
            if result[key] != results[0][key]:
                return Verdict.make(Kind.MISMATCH, f"rank {rank} saw {key} {result[key]}, rank 0 saw {results[0][key]}")
    return None


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"
