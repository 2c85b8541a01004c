"""What `hpo` prints on stdout: a table for people (`--format table`, the default) or JSON for
scripts (`--format json`; `--json` is its alias), with one JSON shape per kind of thing, whichever
command prints it:

- a trial (`trial_json`): `hpo run`, `hpo best` and `hpo train` print the same object;
- a knob row (`knob_row_json`): a knob combination's verdict and speed, from `hpo probe`'s sweep
  or from a study's verdict cache (`hpo doctor --study`);
- a written file (`written_json`): `hpo export` and `hpo report` say which file holds what;
- an enqueued trial (`enqueued_json`): `hpo enqueue`, from a config file or from another study.

Progress, notes and errors go to stderr, so stdout holds only the result. docs/cli.md shows the shapes.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from hpo.records import RecordKey

__all__ = [
    "FORMATS",
    "KNOB_ROW_KEYS",
    "TRIAL_KEYS",
    "WRITTEN_KEYS",
    "ENQUEUED_KEYS",
    "dumps",
    "enqueued_json",
    "knob_row_json",
    "outcome_json",
    "trial_json",
    "written_json",
]

FORMATS = ("table", "json")

TRIAL_KEYS = (
    "number",
    "state",
    "verdict",
    "objectives",
    "values",
    "params",
    "knobs_requested",
    "knobs_observed",
    "user_attrs",
)
KNOB_ROW_KEYS = (
    "knobs",
    "verdict",
    "samples_per_s",
    "slowdown",
    "peak_mem_mb",
    "loss_rel_err",
    "grad_rel_err",
    "device",
    "cached",
    "loss_bound",
    "grad_bound",
    "predicted_peak_mb",
    "largest_batch",
)
WRITTEN_KEYS = ("number", "what", "path")
ENQUEUED_KEYS = ("study", "source", "params", "skipped")


def trial_json(trial, objectives: Sequence[str] | None) -> dict[str, Any]:
    """A study's trial (an Optuna FrozenTrial). `values` only when it trained normally (verdict
    `ok`): a rejected trial's stored values are placeholders, never a result."""
    attrs = trial.user_attrs
    ok = attrs.get(RecordKey.VERDICT) == "ok"
    return _trial(trial.number, trial.state.name, attrs, objectives, trial.values if ok else None, trial.params)


def outcome_json(config, outcome) -> dict[str, Any]:
    """`hpo train`'s result in the trial's shape: no study, so `number` and `state` are null and
    `params` are the config's hyperparameters."""
    attrs = {**outcome.attrs, RecordKey.VERDICT: str(outcome.verdict)}
    return _trial(None, None, attrs, config.objectives, outcome.values, config.training.params())


def _trial(number, state, attrs: Mapping, objectives, values, params) -> dict[str, Any]:
    return {
        "number": number,
        "state": state,
        "verdict": attrs.get(RecordKey.VERDICT),
        "objectives": list(objectives) if objectives else None,
        "values": list(values) if values is not None else None,
        "params": params,
        "knobs_requested": attrs.get(RecordKey.KNOBS_REQUESTED),
        "knobs_observed": attrs.get(RecordKey.KNOBS_OBSERVED),
        "user_attrs": dict(attrs),
    }


def knob_row_json(row: Mapping[str, Any]) -> dict[str, Any]:
    """A knob combination's verdict and speed; a key the source did not measure is null."""
    return {key: row.get(key) for key in KNOB_ROW_KEYS}


def written_json(number: int | None, what: str, path) -> dict[str, Any]:
    """A file a command wrote: the trial it came from (null for a whole study), what it is, where."""
    return {"number": number, "what": what, "path": str(path)}


def enqueued_json(study: str, source: str, params: Mapping[str, Any] | None, skipped: str | None = None) -> dict[str, Any]:
    """A waiting trial put into `study` from `source` (a config file, or another study's trial):
    `params` when it was enqueued, else null and `skipped` says why."""
    return {"study": study, "source": source, "params": dict(params) if params is not None else None, "skipped": skipped}


def dumps(value: Any, indent: int | None = None) -> str:
    """Strict JSON: a non-finite float (which JSON cannot hold) becomes null, anything else unknown a string."""
    return json.dumps(_finite(value), default=str, indent=indent, allow_nan=False)


def _finite(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, Mapping):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, Iterable) and not isinstance(value, (str, bytes)):
        return [_finite(v) for v in value]
    return value
