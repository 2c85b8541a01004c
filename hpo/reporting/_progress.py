"""Progress of a study as it runs: a live tqdm bar on a terminal, plain lines otherwise.

Trials report small events (an evaluation, a finished trial) to one sink per process. In a worker
the sink is its display; in a trial's child process it is the pipe to the worker, so one display
in one process draws the bar however the trials are isolated. Several local workers, or output that
is not a terminal (logs, CI, `| tee`), get one line per event, each naming its trial, which stays
readable when many workers write at once.
"""

from __future__ import annotations

import math
import os
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import optuna
from optuna.trial import FrozenTrial

from hpo.knobs.registry import KNOB_NAMES
from hpo.masking import mask_secrets
from hpo.records import RecordKey
from hpo.reporting._knob_display import observed_knobs
from hpo.verdicts import Verdict

__all__ = ["EvalEvent", "TrialEvent", "TrialPrinter", "eval_line", "make_display", "report", "set_sink"]

MODE_ENV = "HPO_PROGRESS"  # "lines" forces plain lines (set for workers that share a terminal)


@dataclass(frozen=True)
class EvalEvent:
    trial: int
    where: str  # "step 40/100", or "5.0/10 s of training" under a time budget
    metrics: dict[str, float]


@dataclass(frozen=True)
class TrialEvent:
    trial: int
    state: str
    verdict: str
    values: list[float] | None
    knobs: dict = field(default_factory=dict)
    samples_per_s: float | None = None


Event = EvalEvent | TrialEvent
_sink: Callable[[Event], None] | None = None


def set_sink(sink: Callable[[Event], None]) -> None:
    global _sink
    _sink = sink


def report(event: Event) -> None:
    if _sink is None:
        set_sink(LineDisplay(total=0).show)
    _sink(event)


def eval_line(trial_number: int, where: str, metrics: dict[str, float]) -> None:
    report(EvalEvent(trial_number, where, dict(metrics)))


class TrialPrinter:
    """Optuna callback: reports each finished trial."""

    def __call__(self, study: optuna.Study, trial: FrozenTrial) -> None:
        attrs = trial.user_attrs
        verdict = attrs.get(RecordKey.VERDICT, trial.state.name.lower())
        values = list(trial.values) if trial.values is not None and Verdict.parse(verdict).ok else None
        speed = attrs.get(RecordKey.TRAIN_SAMPLES_PER_S)
        report(TrialEvent(trial.number, trial.state.name.lower(), verdict, values, observed_knobs(attrs), speed))


def _trial_text(event: TrialEvent, total: int) -> str:
    values = "" if event.values is None else " ".join(f"{v:.4g}" for v in event.values)
    knobs = " ".join(f"{k}={event.knobs[k]}" for k in KNOB_NAMES if k in event.knobs)
    speed = f" {event.samples_per_s:.1f} samples/s" if isinstance(event.samples_per_s, float) else ""
    verdict = mask_secrets(str(event.verdict))  # an error's verdict may quote a URL
    text = f"trial #{event.trial}{_position(event.trial, total)} {event.state} [{verdict}] {values} {knobs}{speed}"
    return text.replace("  ", " ")


def _position(number: int, total: int) -> str:
    """Where trial `number` (Optuna's, from 0) stands in the study's n_trials: " (3 of 8)". A retry
    of a crashed trial gets its ticket back, so trial numbers can run past n_trials."""
    if total <= 0:  # no study budget known (a trial run outside a worker)
        return ""
    if number < total:
        return f" ({number + 1} of {total})"
    return f" ({number + 1}; n_trials is {total}, retries not counted)"


def _metrics_text(metrics: dict[str, float]) -> str:
    return " ".join(f"{k}={v:.4g}" for k, v in metrics.items())


class LineDisplay:
    def __init__(self, total: int):
        self.total, self.start = total, time.perf_counter()

    def show(self, event: Event) -> None:
        if isinstance(event, EvalEvent):
            text = f"  trial {event.trial} {event.where} {_metrics_text(event.metrics)}"
        else:
            text = f"{_trial_text(event, self.total)} ({time.perf_counter() - self.start:.0f} s elapsed)"
        print(text, file=sys.stderr, flush=True)


class BarDisplay:
    """tqdm bar: trials done of the budget, elapsed time, the best value so far and the running
    trial's last evaluation. Finished trials are written above the bar."""

    def __init__(self, total: int, done: int, minimize: bool):
        from tqdm import tqdm

        self.write, self.minimize, self.best = tqdm.write, minimize, math.nan
        self.total = total
        self.bar = tqdm(total=total, initial=done, unit="trial", file=sys.stderr, dynamic_ncols=True, leave=True)

    def show(self, event: Event) -> None:
        if isinstance(event, EvalEvent):
            self._postfix(f"trial {event.trial} {event.where} {_metrics_text(event.metrics)}")
            return
        self.write(_trial_text(event, self.total), file=sys.stderr)
        if event.values:
            first = event.values[0]
            if math.isnan(self.best) or (first < self.best if self.minimize else first > self.best):
                self.best = first
        speed = f"{event.samples_per_s:.0f} samples/s" if isinstance(event.samples_per_s, float) else ""
        self._postfix(f"last trial {event.trial} {speed}")
        self.bar.update(1)

    def _postfix(self, text: str) -> None:
        best = "" if math.isnan(self.best) else f"best {self.best:.4g} | "
        self.bar.set_postfix_str(best + text, refresh=True)


def make_display(total: int, done: int, minimize: bool) -> Callable[[Event], None]:
    """The display for this process: a bar on a terminal, else lines."""
    if sys.stderr.isatty() and os.environ.get(MODE_ENV) != "lines":
        return BarDisplay(total, done, minimize).show
    return LineDisplay(total).show
