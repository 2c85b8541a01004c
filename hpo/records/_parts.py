"""The parts a trial's record nests: the knobs as the trial asked for them and as the evidence showed
they ran (derived from the knob declarations), and the global settings it ran under."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, create_model

from hpo.knobs.systems import TRIAL_KNOBS

__all__ = ["KnobsObserved", "KnobsRequested", "Record", "RuntimeSettings", "observed_lists"]


class Record(BaseModel):
    """A record part: a key it does not declare is an error, not kept."""

    model_config = ConfigDict(extra="forbid")


# The knobs as the trial asked for them: one field per knob of a trial's `Knobs` (hpo.knobs.systems).
KnobsRequested = create_model(
    "KnobsRequested",
    __base__=Record,
    __doc__="The systems knobs as the trial asked for them.",
    __module__=__name__,
    **{name: (k.value_type, ...) for name, k in TRIAL_KNOBS.items()},
)
# The knobs as the evidence of a real training step showed they ran: the fields each knob observes.
KnobsObserved = create_model(
    "KnobsObserved",
    __base__=Record,
    __doc__="The knobs as the evidence of a real training step showed they ran.",
    __module__=__name__,
    **{field: spec for k in TRIAL_KNOBS.values() for field, spec in k.observed_fields.items()},
)


def observed_lists(observed: dict) -> tuple[list[str], list[str]]:
    """The precisions and attention kernels a `knobs_observed` record shows; from its strings only
    for a record written before the lists were."""
    precisions, attentions = observed.get("precisions"), observed.get("attentions")
    if precisions is None:
        text = observed.get("precision")
        precisions = [] if text is None else text.removeprefix("mixed(").removesuffix(")").split("+")
    if attentions is None:
        attentions = [] if observed.get("attention") is None else str(observed["attention"]).split("+")
    return list(precisions), list(attentions)


class RuntimeSettings(Record):
    """Global settings a trial ran under (`hpo.hardware.trial_runtime`)."""

    tf32: bool  # whether TF32 tensor cores ran fp32 matmuls
    cpu_allocator: str  # what the C allocator was set to (`hpo.hardware._allocator`)
