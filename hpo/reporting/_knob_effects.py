"""What each knob value did, measured against its baseline value among comparable trials.

For a knob value V (say precision=bf16) and the knob's baseline B (fp32, eager, for-loop,
checkpointing off, compile off; or the most common value when the baseline never ran), a trial with
V is compared with the trials that had B and the same value of every other knob. Its throughput
ratio is its samples/s over the median of theirs; its metric difference is its first objective
minus the median of theirs; the memory it saved is the median `peak_mem_mb` of those that also
trained at its batch size, less its own (a batch size changes the peak more than any knob does).
The table reports the medians of those comparisons, how many trials had a comparable baseline
(for speed), every verdict the value received with its count and, where trials ran with
`batch_size: auto`, the median batch the value's trials trained at (`batch_size_chosen`): what its
memory bought. Only trials that trained normally enter the ratios, the memory and the batch;
every trial enters the verdict counts.

Hyperparameters such as the learning rate differ between compared trials, so a metric difference
mixes the knob's effect with theirs; the count says how much evidence stands behind each median.
"""

from __future__ import annotations

import math
import statistics
from collections import Counter
from dataclasses import dataclass, field

from optuna.trial import FrozenTrial, TrialState

from hpo.knobs.registry import KNOB_NAMES
from hpo.records import RecordKey
from hpo.verdicts import Verdict
from hpo.verify.fault import REFERENCE_KNOBS

__all__ = ["BASELINES", "KnobEffect", "cells", "header", "knob_effects", "markdown_table"]

BASELINES = REFERENCE_KNOBS.as_dict()  # the knobs every probe compares a trial with


@dataclass
class KnobEffect:
    knob: str
    value: object
    baseline: object
    compared: int = 0
    speed_ratio: float | None = None
    metric_diff: float | None = None
    verdicts: Counter = field(default_factory=Counter)
    memory_saved_mb: float | None = None  # positive: a smaller peak than the baseline's at the same batch
    auto_batch: float | None = None  # median batch_size_chosen, of the trials that chose one


def _knobs(trial: FrozenTrial) -> dict:
    return trial.user_attrs.get(RecordKey.KNOBS_REQUESTED) or {}


def _trained(trial: FrozenTrial) -> bool:
    attrs = trial.user_attrs
    return (
        trial.state == TrialState.COMPLETE
        and Verdict.parse(attrs.get(RecordKey.VERDICT)).ok
        and bool(trial.values)
        and all(math.isfinite(v) for v in trial.values)  # a missed target's worst value compares with nothing
        and attrs.get(RecordKey.TRAIN_SAMPLES_PER_S) is not None  # null: no training step was timed
    )


def knob_effects(trials: list[FrozenTrial]) -> list[KnobEffect]:
    """One row per value of every knob that took more than one value in `trials`. Linear in the
    number of trials: the study note recomputes it as the study grows to thousands."""
    rows, peers = [], _Peers([t for t in trials if _trained(t)])
    for knob in KNOB_NAMES:
        values = Counter(_knobs(t).get(knob) for t in trials if knob in _knobs(t))
        if len(values) < 2:
            continue
        baseline = BASELINES[knob] if BASELINES[knob] in values else values.most_common(1)[0][0]
        for value in sorted(values, key=str):
            rows.append(_effect(trials, peers, knob, value, baseline))
    return rows


def _key(knobs: dict) -> tuple:
    return tuple(sorted(knobs.items()))


def _batch(trial: FrozenTrial):
    """The batch size the trial trained at: the one `batch_size: auto` chose, or its config's."""
    attrs = trial.user_attrs
    chosen = attrs.get(RecordKey.BATCH_SIZE_CHOSEN)
    return chosen if chosen is not None else ((attrs.get(RecordKey.CONFIG) or {}).get("params") or {}).get("batch_size")


class _Peers:
    """Trials that trained, grouped by their whole knob combination, with each group's medians."""

    def __init__(self, trained: list[FrozenTrial]):
        self.trained, self._groups = trained, {}
        for trial in trained:
            self._groups.setdefault(_key(_knobs(trial)), []).append(trial)
        self._medians: dict[tuple, tuple[float, float]] = {}
        self._peaks: dict[tuple, list[float]] = {}
        for trial in trained:
            peak = trial.user_attrs.get(RecordKey.PEAK_MEM_MB)
            if peak is not None:
                self._peaks.setdefault((_key(_knobs(trial)), _batch(trial)), []).append(peak)

    def medians(self, knobs: dict) -> tuple[float, float] | None:
        """(median samples/s, median first objective) of the trials with exactly these knobs."""
        key = _key(knobs)
        if key not in self._medians:
            group = self._groups.get(key)
            if not group:
                return None
            speed = statistics.median(t.user_attrs[RecordKey.TRAIN_SAMPLES_PER_S] for t in group)
            self._medians[key] = (speed, statistics.median(t.values[0] for t in group))
        return self._medians[key]

    def median_peak(self, knobs: dict, batch) -> float | None:
        """The median peak_mem_mb of the trials with exactly these knobs at this batch size."""
        peaks = self._peaks.get((_key(knobs), batch))
        return statistics.median(peaks) if peaks else None


def _effect(trials: list[FrozenTrial], peers: _Peers, knob: str, value, baseline) -> KnobEffect:
    effect = KnobEffect(knob, value, baseline)
    effect.verdicts = Counter(_verdict_kind(t) for t in trials if _knobs(t).get(knob) == value)
    mine = [t for t in peers.trained if _knobs(t).get(knob) == value]
    chosen = [t.user_attrs[RecordKey.BATCH_SIZE_CHOSEN] for t in mine if RecordKey.BATCH_SIZE_CHOSEN in t.user_attrs]
    effect.auto_batch = statistics.median(chosen) if chosen else None
    if value == baseline:
        return effect
    ratios, diffs = [], []
    for trial in mine:
        found = peers.medians({**_knobs(trial), knob: baseline})
        if found is not None:
            ratios.append(trial.user_attrs[RecordKey.TRAIN_SAMPLES_PER_S] / found[0])
            diffs.append(trial.values[0] - found[1])
    saved = [mb for mb in (_memory_saved(t, peers, {**_knobs(t), knob: baseline}) for t in mine) if mb is not None]
    effect.compared = len(ratios)
    if ratios:
        effect.speed_ratio, effect.metric_diff = statistics.median(ratios), statistics.median(diffs)
    effect.memory_saved_mb = statistics.median(saved) if saved else None
    return effect


def _memory_saved(trial: FrozenTrial, peers: _Peers, baseline_knobs: dict) -> float | None:
    """The peak memory (MB) the trial's value saves against its peers with the baseline; None when
    either peak is unknown."""
    peak = trial.user_attrs.get(RecordKey.PEAK_MEM_MB)
    base_peak = peers.median_peak(baseline_knobs, _batch(trial)) if peak is not None else None
    return None if base_peak is None else base_peak - peak


def _verdict_kind(trial: FrozenTrial) -> str:
    return Verdict.parse(trial.user_attrs.get(RecordKey.VERDICT, trial.state.name.lower())).kind.value


HEADER = (
    "knob",
    "value",
    "vs",
    "samples/s ratio",
    "{metric} difference",
    "compared",
    "peak MB saved",
    "auto batch",
    "verdicts",
)


def header(metric: str) -> list[str]:
    return [h.format(metric=metric) for h in HEADER]


def cells(e: KnobEffect) -> list[str]:
    """One row of the table as text, in `header` order."""
    ratio = "baseline" if e.value == e.baseline else ("-" if e.speed_ratio is None else f"{e.speed_ratio:.2f}x")
    diff = "-" if e.metric_diff is None else f"{e.metric_diff:+.4g}"
    saved = "baseline" if e.value == e.baseline else ("-" if e.memory_saved_mb is None else f"{e.memory_saved_mb:+.0f}")
    batch = "-" if e.auto_batch is None else f"{e.auto_batch:g}"
    verdicts = ", ".join(f"{kind} {n}" for kind, n in e.verdicts.most_common())
    return [e.knob, str(e.value), str(e.baseline), ratio, diff, str(e.compared), saved, batch, verdicts]


def markdown_table(effects: list[KnobEffect], metric: str) -> str:
    """The table as Markdown, for dashboard notes."""
    rows = [header(metric), ["---"] * len(HEADER), *(cells(e) for e in effects)]
    return "\n".join("| " + " | ".join(row) + " |" for row in rows)
