"""A trial's verdict: why it ended as it did, as a small type rather than a string to parse.

A `Verdict` has a kind, a detail for people, and `implicates`: the knob values it blames, as
(knob, value) pairs that fail together. A missing package or an unsupported dtype implicates one
value (`attention=flash_attn`); a kernel that refuses a dtype implicates a pair (`attention=sdpa_flash`
with `precision=fp32`); nothing is implicated when the cause is not a knob (a learning rate that
diverges, a crash). The sampler wrapper avoids exactly the implicated values and pairs.

Storage keeps today's readable string (`str(verdict)`, e.g. `incompatible: attention=...: ...`) in
the trial's `verdict` attr and the implicated pairs in `verdict_implicates`. `Verdict.parse` is the
only code that reads a stored string back (for studies written before this type existed).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from enum import Enum
from typing import Any

__all__ = ["Kind", "Verdict"]


class Kind(str, Enum):
    OK = "ok"
    INCOMPATIBLE = "incompatible"  # the knobs cannot run together here
    SLOW = "slow"  # they run, slower than the study allows
    MISMATCH = "mismatch"  # the evidence shows a knob ran as something else
    DIVERGED = "diverged"  # non-finite loss or metrics
    OOM = "oom"
    PRUNED = "pruned"  # the study's pruner stopped it
    CRASHED = "crashed"  # its process died
    TIMEOUT = "timeout"  # it ran longer than study.trial_timeout_s and was ended
    INTERRUPTED = "interrupted"  # its worker was interrupted (Ctrl-C) while it ran
    TERMINATED = "terminated"  # its worker was stopped by SIGTERM while it ran
    ERROR = "error"  # the trial raised something else


# Kinds that depend only on the knobs (not on the learning rate or batch size): never worth retrying.
AVOIDABLE = frozenset({Kind.INCOMPATIBLE, Kind.SLOW})

Part = tuple[tuple[str, Any], ...]


@dataclass(frozen=True)
class Verdict:
    kind: Kind
    detail: str = ""
    implicates: Part = ()

    def __str__(self) -> str:
        return self.kind.value if not self.detail else f"{self.kind.value}: {self.detail}"

    @classmethod
    def make(cls, kind: Kind, detail: str = "", implicates: Iterable[tuple[str, Any]] = ()) -> Verdict:
        return cls(kind, detail, tuple(sorted(((str(k), v) for k, v in implicates), key=lambda kv: kv[0])))

    @classmethod
    def parse(cls, text: str | None) -> Verdict:
        """Read a stored verdict string; an unknown or missing one reads as an error."""
        if not text:
            return cls(Kind.ERROR, "no verdict recorded")
        head, _, detail = str(text).partition(": ")
        head = head.rstrip(":")
        try:
            return cls(Kind(head), detail)
        except ValueError:
            return cls(Kind.ERROR, str(text))

    @property
    def ok(self) -> bool:
        return self.kind is Kind.OK

    @property
    def avoidable(self) -> bool:
        """Known to fail for its knobs alone: the sampler should never propose them again."""
        return self.kind in AVOIDABLE

    @property
    def feasible(self) -> bool:
        """Trained normally, or stopped by the pruner: its region is not to be avoided."""
        return self.kind in (Kind.OK, Kind.PRUNED)

    def implicated_record(self) -> list[list[Any]]:
        """The implicated pairs as JSON-friendly lists, for a trial's `verdict_implicates`."""
        return [[k, v] for k, v in self.implicates]

    @staticmethod
    def part_from_record(record: Iterable) -> Part:
        return tuple(sorted(((str(k), v) for k, v in record), key=lambda kv: kv[0]))
