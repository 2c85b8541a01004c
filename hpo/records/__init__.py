"""What every trial records: the one schema of the Optuna user attrs hpo writes on a trial.

The executor, the study's objective, the evidence and the crash handling write these keys; `hpo
best`, `hpo report`, the dashboard and users' own scripts read them. Every key is declared here, with
its meaning, and the docs' record reference is generated from these declarations (`python -m
hpo.app.docgen` writes it; a test keeps it in step). Writers and readers name a key by its `RecordKey` constant
(a test checks the constants are the schema's fields). `check_trial_attrs` validates one trial's
attrs, which the tests do for every trial of real studies.

It sits below every layer that writes a record (storage, hardware, evidence, trial, study), so each
of them can name the keys; of hpo it imports only the knob declarations, whose records it derives.
"""

from __future__ import annotations

from typing import Any

from hpo.records._keys import RecordKey
from hpo.records._parts import KnobsObserved, KnobsRequested, RuntimeSettings, observed_lists
from hpo.records._trial_record import TrialRecord

__all__ = [
    "KnobsObserved",
    "KnobsRequested",
    "RecordKey",
    "RuntimeSettings",
    "TrialRecord",
    "check_trial_attrs",
    "observed_lists",
    "readme_list",
]


def check_trial_attrs(attrs: dict[str, Any]) -> TrialRecord:
    """Validate one trial's user attrs against the schema; raises pydantic.ValidationError."""
    return TrialRecord.model_validate(attrs)


def readme_list() -> str:
    """The list of trial user attrs, one line per key, generated from the schema."""
    lines = []
    for name, field in TrialRecord.model_fields.items():
        lines.append(f"- `{name}`: {field.description}.")
    return "\n".join(lines)
