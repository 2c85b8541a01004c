"""Each rank's observed knob effects judged against the request: a knob that did something else
than asked ends the trial `mismatch`, naming the rank and the knob, as a one-process knob that ran
as something else does. Nothing is implicated for the sampler to avoid: a value that did not take
effect says nothing about how that value would run."""

from __future__ import annotations

from collections.abc import Callable

from hpo.config.trial import ParallelSettings
from hpo.knobs.systems.parallel import PARALLEL_KNOBS
from hpo.verdicts import Kind, Verdict

__all__ = ["CHECKS", "contradiction"]

# Each parallel knob's check of its observed effect, from its module.
CHECKS: dict[str, Callable[..., str | None]] = {name: knob.contradiction for name, knob in PARALLEL_KNOBS.items()}


def contradiction(results: list[dict], settings: ParallelSettings) -> Verdict | None:
    """The first rank, then knob, whose observed effect contradicts the requested value; None when
    every observed effect agrees (a knob observed as None had nothing to act on)."""
    for rank, result in enumerate(results):
        for knob, seen in sorted(result["parallel_observed"].items()):
            why = None if seen is None else CHECKS[knob](getattr(settings, knob), seen)
            if why is not None:
                return Verdict.make(Kind.MISMATCH, f"rank {rank}: systems.parallel.{why}")
    return None
