"""One row of a sweep (`hpo probe`, probe_first's opening sweep): a knob combination, its verdict and
what was measured; and the table people read."""

from __future__ import annotations

import time
from dataclasses import dataclass

from hpo.knobs.systems import TRIAL_KNOBS
from hpo.verify.timing import DEFAULT_POLICY, StepTimes, TimingPolicy

__all__ = ["SweepRow", "steady", "table"]


@dataclass
class SweepRow:
    knobs: dict
    verdict: str
    samples_per_s: float | None
    slowdown: float | None
    peak_mem_mb: float | None
    loss_rel_err: float | None
    grad_rel_err: float | None
    cached: bool
    slowdown_at_least: bool = False  # the step was stopped past the slow limit: a lower bound
    loss_bound: float | None = None  # the bounds the errors were judged against, measured on this model
    grad_bound: float | None = None
    # This machine's facts (`hpo.verify.stored._machine_facts`): the entry's key, whether the row was read
    # from it instead of probed, and the step times it was last raced on (probe_first's re-timing).
    machine_key: str | None = None
    from_machine: bool = False
    known_ms: list[float] | None = None
    fact_at: float | None = None  # when the machine fact it was read from was stored (epoch seconds)
    timed_now: bool = False  # read from the facts, its speed timed again before it ranked (`hpo probe`)
    # The timed steps its speed is the fastest of (after the untimed ones; `hpo.verify.timing._steady`).
    steps_ms: list[float] | None = None
    # With a memory limit (`hpo.strategy._memory_fit`): the peak predicted at the study's batch, and
    # the largest batch that fits; None without one.
    predicted_peak_mb: float | None = None
    largest_batch: int | None = None


def steady(row: SweepRow, policy: TimingPolicy = DEFAULT_POLICY) -> bool:
    """Whether the row's speed comes from steady steps (at least `min_repeats` whose fastest agree
    within the policy's spread), not one step: one step's time is only an upper bound of the step
    time (noise only adds time), so its samples/s only a lower bound."""
    steps = row.steps_ms or []
    return len(steps) >= policy.min_repeats and StepTimes(tuple(steps), 0, policy.window).spread <= policy.steady_spread


def _speed(row: SweepRow) -> str:
    return _fmt(row.samples_per_s, "{:.1f}" if steady(row) else ">={:.1f}")


def _source(row: SweepRow) -> str:
    if not row.from_machine:
        return ""
    day = "undated" if row.fact_at is None else time.strftime("%Y-%m-%d", time.gmtime(row.fact_at))
    return f"machine fact of {day}{', speed timed now' if row.timed_now else ''}: "


def table(rows: list[SweepRow]) -> str:
    """The rows for people; the memory columns only when a limit applied to some row. A speed not
    timed steady reads `>=` (a lower bound); a row read from this machine's facts says so, with
    the day the fact was stored."""
    memory = any(r.largest_batch is not None for r in rows)
    head, body = _head(memory), [_cells(r, memory) for r in rows]
    widths = [max(len(row[i]) for row in [head, *body]) for i in range(len(head))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in [head, *body])


def _head(memory: bool) -> list[str]:
    return [
        *(knob.header for knob in TRIAL_KNOBS.values()),
        "samples/s",
        "x fp32",
        "peak MB",
        *(["pred MB", "max batch"] if memory else []),
        "loss err",
        "grad err",
        "bound",
        "verdict",
    ]


def _cells(r: SweepRow, memory: bool) -> list[str]:
    """One row's cells under `_head(memory)`."""
    return (
        [str(r.knobs.get(name, knob.default)) for name, knob in TRIAL_KNOBS.items()]
        + [
            _speed(r),
            _fmt(r.slowdown, ">={:.2f}" if r.slowdown_at_least else "{:.2f}"),
            _fmt(r.peak_mem_mb, "{:.0f}"),
        ]
        + ([_fmt(r.predicted_peak_mb, "{:.0f}"), _fmt(r.largest_batch, "{}")] if memory else [])
        + [
            _fmt(r.loss_rel_err, "{:.1e}"),
            _fmt(r.grad_rel_err, "{:.1e}"),
            _fmt(r.grad_bound, "{:.1e}"),
            (_source(r) + r.verdict)[:90],
        ]
    )


def _fmt(value, fmt: str) -> str:
    return "-" if value is None else fmt.format(value)
