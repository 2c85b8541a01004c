"""The knobs every probe compares a trial with, fp32/eager/for-loop, and what differs from them: the
values a measured verdict (too slow, too far off) can implicate, which a differential run then
narrows to the value or pair at fault (`hpo.verify.blame`)."""

from __future__ import annotations

from hpo.config.trial import Knobs

__all__ = ["REFERENCE_KNOBS", "differing_from_reference"]

REFERENCE_KNOBS = Knobs(precision="fp32", attention="eager", optimizer="forloop")


def differing_from_reference(knobs: Knobs) -> list[tuple[str, object]]:
    """The knob values of `knobs` that differ from the reference, in knob order."""
    reference = REFERENCE_KNOBS.as_dict()
    return [(k, v) for k, v in knobs.as_dict().items() if v != reference[k]]
