"""Each rank's observed knob effects judged against the request: a knob that did something else
than asked ends the trial `mismatch`, naming the rank and the knob, as a one-process knob that ran
as something else does. Nothing is implicated for the sampler to avoid: a value that did not take
effect says nothing about how that value would run."""

from __future__ import annotations

from collections.abc import Callable

from hpo.config.trial import ParallelSettings
from hpo.parallel.observe import bucket_cap_contradiction, bucket_view_contradiction, reshard_contradiction
from hpo.verdicts import Kind, Verdict

__all__ = ["CHECKS", "contradiction"]

CHECKS: dict[str, Callable[..., str | None]] = {
    "bucket_cap_mb": bucket_cap_contradiction,
    "gradient_as_bucket_view": bucket_view_contradiction,
    "reshard_after_forward": reshard_contradiction,
}


def contradiction(results: list[dict], settings: ParallelSettings) -> Verdict | None:
    """The first rank, then knob, whose observed effect contradicts the requested value; None when
    every observed effect agrees (a knob observed as None had nothing to act on)."""
    for rank, result in enumerate(results):
        for knob, seen in sorted(result["parallel_observed"].items()):
            why = None if seen is None else CHECKS[knob](getattr(settings, knob), seen)
            if why is not None:
                return Verdict.make(Kind.MISMATCH, f"rank {rank}: systems.parallel.{why}")
    return None
