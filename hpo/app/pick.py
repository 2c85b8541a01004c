"""Choosing among a study's trials: the Pareto front as a table, and the fastest trial whose
primary metric is within a given percent of the best ("give me the speed, keep the quality").

Only trials that trained normally (verdict `ok`) are candidates: a rejected trial's recorded value
is a placeholder and never a result.
"""

from __future__ import annotations

import math

import optuna
from optuna.study import StudyDirection
from optuna.trial import FrozenTrial

from hpo.errors import UserInputError
from hpo.knobs.registry import KNOB_NAMES
from hpo.records import RecordKey
from hpo.reporting import observed_knob, trained_trials

__all__ = ["fastest_within", "front_table", "trained_trials"]


def fastest_within(study: optuna.Study, percent: float) -> FrozenTrial:
    """The trial with the highest training throughput among those whose first objective is within
    `percent` percent of the best value of that objective."""
    if not percent >= 0:
        raise UserInputError(f"--within must be a percentage >= 0, got {percent}")
    trials = trained_trials(study)
    if not trials:
        raise UserInputError(f"study {study.study_name!r} has no completed trial with verdict ok yet")
    minimize = study.directions[0] == StudyDirection.MINIMIZE
    best = (min if minimize else max)(t.values[0] for t in trials)
    slack = abs(best) * percent / 100
    near = [t for t in trials if (t.values[0] <= best + slack if minimize else t.values[0] >= best - slack)]
    return max(near, key=lambda t: (t.user_attrs.get(RecordKey.TRAIN_SAMPLES_PER_S) or 0.0, -t.number))


def front_table(trials: list[FrozenTrial], metric_names: list[str]) -> str:
    """A plain-text table: trial, the objectives, samples/s, data wait share, peak memory, MFU, the knobs."""
    header = ["trial", *metric_names, "samples/s", "data wait", "peak MB", "MFU", *KNOB_NAMES]
    rows = [header] + [_row(t) for t in trials]
    widths = [max(len(r[i]) for r in rows) for i in range(len(header))]
    return "\n".join("  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip() for row in rows)


def _row(trial: FrozenTrial) -> list[str]:
    attrs = trial.user_attrs
    return [
        str(trial.number),
        *(f"{v:.5g}" for v in trial.values or ()),
        _number(attrs.get(RecordKey.TRAIN_SAMPLES_PER_S), "{:.1f}"),
        _number(attrs.get(RecordKey.DATA_WAIT_SHARE), "{:.0%}"),  # of training time, blocked on the next batch
        _number(attrs.get(RecordKey.PEAK_MEM_MB), "{:.0f}"),
        _number(attrs.get(RecordKey.MFU), "{:.2%}"),
        *(observed_knob(attrs, k) for k in KNOB_NAMES),  # as the evidence showed them ran
    ]


def _number(value, fmt: str) -> str:
    return "-" if not isinstance(value, (int, float)) or not math.isfinite(value) else fmt.format(value)
