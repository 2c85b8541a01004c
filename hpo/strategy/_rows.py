"""One row of a sweep (`hpo probe`, probe_first's opening sweep): a knob combination, its verdict and
what was measured; and the table people read."""

from __future__ import annotations

from dataclasses import dataclass

from hpo.knobs.registry import KNOB_NAMES

__all__ = ["SweepRow", "table"]


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
    # This machine's facts (`hpo.verify.machine_facts`): the entry's key, whether the row was read
    # from it instead of probed, and the step times it was last raced on (probe_first's re-timing).
    machine_key: str | None = None
    from_machine: bool = False
    known_ms: list[float] | None = None
    # The timed steps its speed is the fastest of (after the untimed ones; `hpo.verify.steady`).
    steps_ms: list[float] | None = None
    # With a memory limit (`hpo.strategy._memory_fit`): the peak predicted at the study's batch, and
    # the largest batch that fits; None without one.
    predicted_peak_mb: float | None = None
    largest_batch: int | None = None


def table(rows: list[SweepRow]) -> str:
    """The rows for people; the memory columns only when a limit applied to some row."""
    memory = any(r.largest_batch is not None for r in rows)
    head = [
        "precision",
        "attention",
        "optimizer",
        "ckpt",
        "compile",
        "samples/s",
        "x fp32",
        "peak MB",
        *(["pred MB", "max batch"] if memory else []),
        "loss err",
        "grad err",
        "bound",
        "verdict",
    ]
    body = [
        [str(r.knobs[k]) for k in KNOB_NAMES]
        + [
            _fmt(r.samples_per_s, "{:.1f}"),
            _fmt(r.slowdown, ">={:.2f}" if r.slowdown_at_least else "{:.2f}"),
            _fmt(r.peak_mem_mb, "{:.0f}"),
        ]
        + ([_fmt(r.predicted_peak_mb, "{:.0f}"), _fmt(r.largest_batch, "{}")] if memory else [])
        + [_fmt(r.loss_rel_err, "{:.1e}"), _fmt(r.grad_rel_err, "{:.1e}"), _fmt(r.grad_bound, "{:.1e}"), r.verdict[:70]]
        for r in rows
    ]
    widths = [max(len(row[i]) for row in [head, *body]) for i in range(len(head))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in [head, *body])


def _fmt(value, fmt: str) -> str:
    return "-" if value is None else fmt.format(value)
