"""How a trial's systems knobs are shown to a user: as the evidence observed them, never as asked.

A knob that no evidence observed is null in the trial's `knobs_observed` (or absent, when the trial
never ran far enough to observe anything). Every view (the dashboard note, the report, the progress
line and `hpo best`) renders it with this one function, as NOT_OBSERVED, and none falls back to the
requested value.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from hpo.knobs.registry import KNOB_NAMES
from hpo.records import RecordKey

__all__ = ["NOT_OBSERVED", "observed_knob", "observed_knobs"]

NOT_OBSERVED = "not observed"


def observed_knob(attrs: Mapping[str, Any], knob: str) -> str:
    """`knob` as the trial's evidence observed it, or NOT_OBSERVED."""
    value = (attrs.get(RecordKey.KNOBS_OBSERVED) or {}).get(knob)
    return NOT_OBSERVED if value is None else str(value)


def observed_knobs(attrs: Mapping[str, Any]) -> dict[str, str]:
    """Every systems knob of a trial (its user attrs), rendered by `observed_knob`."""
    return {knob: observed_knob(attrs, knob) for knob in KNOB_NAMES}
