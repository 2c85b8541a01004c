"""How a trial ended: `TrialOutcome`, and the cached verdicts that end a trial before it runs."""

from __future__ import annotations

from dataclasses import dataclass, field

from hpo.records import RecordKey
from hpo.verdicts import Kind, Verdict
from hpo.verify.stored import VerdictStore, speed_key

__all__ = ["TrialOutcome", "cached_verdict", "ended", "known_verdict"]


@dataclass
class TrialOutcome:
    """`verdict` is `ok` or the reason the trial did not train normally; `values` only when ok."""

    verdict: Verdict
    values: list[float] | None
    attrs: dict = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return self.verdict.ok

    @property
    def pruned(self) -> bool:
        return self.verdict.kind is Kind.PRUNED


def ended(verdict: Verdict, attrs: dict) -> TrialOutcome:
    """A trial that did not train normally; what its verdict implicates is recorded beside it. An
    avoidable verdict that names no part records an empty list: with none, the avoidance would take
    the whole combination, as for trials recorded before verdicts named their parts."""
    if verdict.implicates or verdict.avoidable:
        attrs[RecordKey.VERDICT_IMPLICATES] = verdict.implicated_record()
    return TrialOutcome(verdict=verdict, values=None, attrs=attrs)


def cached_verdict(record: dict) -> Verdict:
    """A verdict cache record's verdict, with what it implicates (none in records before that)."""
    verdict = Verdict.parse(record["verdict"])
    return Verdict.make(verdict.kind, verdict.detail, Verdict.part_from_record(record.get("implicates", [])))


def known_verdict(verdicts: VerdictStore, key: str, batch_size: int) -> Verdict | None:
    """The cached verdict that rules the combination out at this batch size, if any: its probe's
    (any batch size) or its speed fact's (this batch size)."""
    for record in (verdicts.get(key), verdicts.get(speed_key(key, batch_size))):
        if record is not None and not cached_verdict(record).ok:
            return cached_verdict(record)
    return None
