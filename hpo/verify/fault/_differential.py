"""Which knob values a failure proves at fault: a differential run against the reference.

A verdict is cached for the whole study and steers every sampler away from what it implicates, so
it must implicate only what a run has shown to fail. The fp32/eager/for-loop reference has passed
the step (the probe ran it, or an earlier probe of the same model did); the trial's knobs failed it
in a way no upstream contract names (`hpo.verify.fault._known_failures` covers those). So the values that
differ from the reference are tried from the reference, one at a time, then in pairs: the first
subset that fails by itself is what the verdict implicates. When no smaller subset fails, the whole
combination is tried again: failing again, it is implicated as a whole; passing, the first failure
did not repeat and proves nothing about the knobs (`isolate` returns None; the caller reports it as
an error).

Each try is one step of a freshly built model, about a second on the models here, so a study pays a
few seconds once per failing combination instead of a trial for each value it would otherwise
rediscover (on an AVX2 host, where bf16 and fp16 are both slow, a trial each).
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Callable

from hpo.config.trial import Knobs
from hpo.verdicts import Verdict
from hpo.verify.fault._reference_knobs import REFERENCE_KNOBS, differing_from_reference

__all__ = ["Attempt", "candidate_subsets", "isolate", "with_values"]

# Runs one step with these knobs: None if it passed, else the verdict of its failure.
Attempt = Callable[[Knobs], "Verdict | None"]

# Subsets larger than a pair are not tried alone: the whole combination is, last.
MAX_SUBSET = 2


def with_values(values: tuple[tuple[str, object], ...]) -> Knobs:
    """The reference knobs with `values` (knob, value) changed."""
    return dataclasses.replace(REFERENCE_KNOBS, **dict(values))


def candidate_subsets(knobs: Knobs) -> list[tuple[tuple[str, object], ...]]:
    """The proper subsets of the knobs' differences from the reference that `isolate` tries, in
    order: each value alone, then each pair."""
    differing = differing_from_reference(knobs)
    sizes = range(1, min(MAX_SUBSET, len(differing) - 1) + 1)
    return [subset for size in sizes for subset in itertools.combinations(differing, size)]


def isolate(knobs: Knobs, attempt: Attempt) -> Verdict | None:
    """The verdict of the smallest subset of `knobs`' differences that fails on its own, or of the
    whole combination when it fails again; None when it passes when repeated."""
    for subset in candidate_subsets(knobs):
        verdict = attempt(with_values(subset))
        if verdict is not None:
            return verdict
    return attempt(knobs)
