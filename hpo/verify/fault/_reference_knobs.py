"""The knobs every probe compares a trial with, each knob's declared reference value (fp32, eager,
the for-loop, ...: `Knob.reference` in hpo.knobs.systems), and what differs from them: the
values a measured verdict (too slow, too far off) can implicate, which a differential run then
narrows to the value or pair at fault (`hpo.verify.fault._differential`). And whether a reference step really ran
them: a workload that ignores a knob (a wrapper that lets transformers pick SDPA) runs something
else as the "reference", and a trial compared with it would pass with an error of exactly 0."""

from __future__ import annotations

from hpo.config.trial import Knobs
from hpo.knobs.systems import TRIAL_KNOBS

__all__ = ["REFERENCE_KNOBS", "differing_from_reference", "ran_other_than_reference"]

REFERENCE_KNOBS = Knobs(**{name: knob.reference for name, knob in TRIAL_KNOBS.items()})


def differing_from_reference(knobs: Knobs) -> list[tuple[str, object]]:
    """The knob values of `knobs` that differ from the reference, in knob order."""
    reference = REFERENCE_KNOBS.as_dict()
    return [(k, v) for k, v in knobs.as_dict().items() if v != reference[k]]


def ran_other_than_reference(observed: dict) -> str | None:
    """Why a step observed as `observed` is not the reference's (the knobs it ran otherwise, and
    what that says of the workload), or None when nothing contradicts the reference knobs."""
    # Here, not at the top: this module is read before the forkserver starts, and evidence imports torch.
    from hpo.evidence.observe import mismatches

    found = mismatches(REFERENCE_KNOBS, observed)
    if not found:
        return None
    return "; ".join(f"the reference ran {m.ran}, not {m.asked}: this workload ignores `{m.knob}`" for m in found)
