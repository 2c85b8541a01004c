"""Whether the knobs' steps are slower than `ratio` times the reference's beyond what a busy machine's
noise explains: a rank test over every pair of a knobs step and a reference step of the side-by-side
rounds (`hpo.verify.timing._side_by_side`), the pair counted when the knobs step took over `ratio` times the
reference step.

Fastest against fastest, each side's after a few rounds, is no such proof: at a load of 40 on 2
cores grad checkpointing, 1.37x by a plain loop, was judged `at least 1.5x` (every one of its steps
over 1.5x the reference's fastest, 738 ms, a step the knobs' side never got the like of). Counting
pairs asks instead how often the knobs lost: if they were no slower than `ratio` times the
reference, their steps and `ratio` times the reference's would be drawn from one distribution, and
the chance that the knobs lose at least that many of the m x n pairs is known exactly whatever the
noise (the Mann-Whitney count over orderings). A verdict needs that chance at most SLOW_CHANCE,
which m = n = 6 rounds can reach only with every pair lost; a step the knobs' side stopped early
counts, against a reference step, only when its time so far is over `ratio` times that step.
"""

from __future__ import annotations

import enum
import functools
import math
from collections.abc import Sequence

__all__ = ["SLOW_CHANCE", "Outlook", "chance_of_losing", "describe", "outlook", "pairs_lost"]

# The most chance of noise alone a `slow` verdict may rest on. 1/924 is the chance that 6 steps of
# each side fall with every knobs step last, so no verdict comes before 6 rounds. On the simulated
# busy machine of `tests/verify/test_slow_proof_under_load.py`, a knob 9% under the limit (1.37x
# against 1.5x) was judged slow in 0 of 4000 proofs, and in 1 and 3 of 4000 on clocks twice as
# noisy; at 1/252 (5 rounds) in 1, 6 and 5 of 4000.
SLOW_CHANCE = 0.002


class Outlook(enum.Enum):
    SLOW = "slow"  # proven: the knobs lost too many pairs for noise
    OPEN = "open"  # not yet: more rounds could prove it
    UNPROVABLE = "unprovable"  # not even losing every pair of the rounds left would prove it


def pairs_lost(knobs_ms: Sequence[float], reference_ms: Sequence[float], ratio: float) -> int:
    """The pairs of a knobs step and a reference step in which the knobs step took over `ratio` times
    the reference step (a stopped step's time is a lower bound: counted only when already over)."""
    return sum(1 for knob in knobs_ms for reference in reference_ms if knob > ratio * reference)


def chance_of_losing(lost: int, knobs: int, references: int) -> float:
    """The chance that `knobs` steps lose at least `lost` pairs to `references` steps when both are
    drawn from one distribution: the share of their orderings with that many pairs lost."""
    if lost <= 0:
        return 1.0
    at_least = sum(_orderings(knobs, references, count) for count in range(lost, knobs * references + 1))
    return at_least / math.comb(knobs + references, knobs)


@functools.lru_cache(maxsize=4096)
def _orderings(knobs: int, references: int, lost: int) -> int:
    """How many orderings of the steps make the knobs lose exactly `lost` pairs: the slowest step is
    either a knobs step (it loses to every reference step) or a reference step (it beats none)."""
    if lost < 0:
        return 0
    if knobs == 0 or references == 0:
        return int(lost == 0)
    return _orderings(knobs - 1, references, lost - references) + _orderings(knobs, references - 1, lost)


def outlook(knobs_ms: Sequence[float], reference_ms: Sequence[float], ratio: float, max_rounds: int) -> Outlook:
    """Whether the rounds so far prove the knobs over `ratio`, could still within `max_rounds`
    rounds of one step a side, or cannot."""
    lost, knobs, references = pairs_lost(knobs_ms, reference_ms, ratio), len(knobs_ms), len(reference_ms)
    if chance_of_losing(lost, knobs, references) <= SLOW_CHANCE:
        return Outlook.SLOW
    left = max(max_rounds - min(knobs, references), 0)
    best = lost + (knobs + left) * (references + left) - knobs * references
    return Outlook.OPEN if chance_of_losing(best, knobs + left, references + left) <= SLOW_CHANCE else Outlook.UNPROVABLE


def describe(knobs_ms: Sequence[float], reference_ms: Sequence[float], ratio: float) -> str:
    """The pairs lost and their chance, for a reason why nothing was judged."""
    lost = pairs_lost(knobs_ms, reference_ms, ratio)
    chance = chance_of_losing(lost, len(knobs_ms), len(reference_ms))
    return (
        f"the knobs took over {ratio}x the reference in {lost} of {len(knobs_ms) * len(reference_ms)} pairs of steps "
        f"({len(knobs_ms)} rounds), as noise alone would by a chance of {chance:.1%} (a verdict needs "
        f"{SLOW_CHANCE:.1%} or less)"
    )
