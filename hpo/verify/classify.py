"""Name the knob behind an exception raised while probing, for the trial's `incompatible:` verdict,
and the reference a measured verdict (too slow, too far off) is compared with."""

from __future__ import annotations

from hpo.config.trial import Knobs
from hpo.verdicts import Verdict
from hpo.verify.known_failures import match_known_failure


def classify_failure(exc: BaseException, knobs: Knobs) -> Verdict | None:
    """The verdict of a known knob failure (`hpo.verify.known_failures`), implicating exactly the
    value or (value, precision) pair at fault; None when the failure is not a known knob failure:
    the caller then runs a differential run instead of blaming every differing knob."""
    return match_known_failure(exc, knobs)


# What the probe compares every trial with; a verdict measured against it blames the differences.
REFERENCE_KNOBS = Knobs(precision="fp32", attention="eager", optimizer="forloop")


def differing_from_reference(knobs: Knobs) -> list[tuple[str, object]]:
    """The knob values that differ from the fp32/eager/for-loop reference: what a verdict measured
    against it (too slow, too far off) can blame. One differing value is blamed alone; several are
    blamed together, since the probe cannot tell which of them did it."""
    reference = REFERENCE_KNOBS.as_dict()
    return [(k, v) for k, v in knobs.as_dict().items() if v != reference[k]]
