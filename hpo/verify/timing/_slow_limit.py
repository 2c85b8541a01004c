"""The slow check: a trial whose step takes over `slow_ratio` times the fp32/eager/for-loop
reference's step is rejected as `slow`, at its batch size: a combination that is overhead-bound
at batch 8 may pay off at batch 128, so the verdict implicates the batch size with the knob values
(the sampler wrapper ignores it where the study fixes the batch size). Which of several differing
values is slow is proven by timing them one at a time (`hpo.verify.timing.prove_slow`).

The reference's step time is measured once per model, batch size and device and kept in the
verdict store (`reference_key`). A trial's own step time comes from its first steady training
steps (`hpo.trial._trainer`): the trial runs them anyway, at its real batch and in train mode, so
the check costs nothing extra. `hpo probe`, which trains nothing, times the steps in the probe.
"""

from __future__ import annotations

from dataclasses import dataclass

from hpo.config.trial import Knobs
from hpo.verdicts import Kind, Verdict
from hpo.verify.fault import differing_from_reference

__all__ = ["SlowLimit"]


@dataclass(frozen=True)
class SlowLimit:
    reference_ms: float
    ratio: float
    batch_size: int

    def slowdown(self, step_ms: float) -> float:
        return step_ms / self.reference_ms

    def verdict(self, knobs: Knobs, step_ms: float, at_least: bool = False) -> Verdict | None:
        """A `slow` verdict for a trial whose fastest steady step took `step_ms` (`at_least`: or
        longer, the step having been stopped past the limit), or None."""
        slowdown = self.slowdown(step_ms)
        if slowdown <= self.ratio:
            return None
        over = "at least " if at_least else ""
        stopped = ", stopped there" if at_least else ""
        detail = (
            f"{over}{slowdown:.1f}x the fp32/eager step time at batch {self.batch_size} on this device "
            f"({over}{step_ms:.0f} ms{stopped} vs {self.reference_ms:.0f} ms; limit {self.ratio}x)"
        )
        return Verdict.make(Kind.SLOW, detail, [*differing_from_reference(knobs), ("batch_size", self.batch_size)])
