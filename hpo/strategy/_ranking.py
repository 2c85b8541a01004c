"""How `study.strategy: probe_first` ranks one precision's verified knob combinations: by step time
measured again with repeats interleaved across them (`Timing`), since a single timing varied by up to
25% between combinations that run the same kernels (FINDINGS). Combinations within the measurement
noise of each other are a tie, and a tie goes to the combination closest to the reference
(fp32/eager/for-loop, no checkpointing, no compile). The race (`hpo.strategy._race`) drops a
candidate once it provably cannot be among the `keep_fastest` (`outpaced`); the `keep_fastest` first
of each precision are kept (`kept_of`), and the sampler then searches the hyperparameters and, among
the kept, the precision and which of them (`hpo.study._suggest.suggest_kept`).
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass

from hpo.verify.fault import REFERENCE_KNOBS
from hpo.verify.timing import DEFAULT_POLICY, StepTimes

__all__ = [
    "NOISE_FLOOR",
    "REFERENCE",
    "Ranked",
    "TIE_MARGIN",
    "Timing",
    "kept_of",
    "outpaced",
    "rank_precision",
    "rejected_lines",
]

# Two timings closer than this (relative) are a tie even if their repeats agree more closely.
NOISE_FLOOR = 0.05
# The study's tie margin: how far behind a combination must provably be to lose, not tie.
TIE_MARGIN = NOISE_FLOOR
# The probes' reference knobs (fp32/eager/for-loop), less precision: combinations are ranked within one.
REFERENCE = {k: v for k, v in REFERENCE_KNOBS.as_dict().items() if k != "precision"}


@dataclass(frozen=True)
class Timing:
    """One combination's step times (ms), one per interleaved repeat."""

    knobs: dict
    times_ms: tuple[float, ...]

    @property
    def median_ms(self) -> float:
        return statistics.median(self.times_ms)

    @property
    def spread(self) -> float:
        """How far apart this machine measured the same thing: the relative range of the fastest
        `DEFAULT_POLICY.window` repeats (noise only adds time: a slower repeat is the noise, not the
        spread of the speed), as a steady timing's (`hpo.verify.timing._steady.StepTimes.spread`)."""
        return StepTimes(self.times_ms, 0, DEFAULT_POLICY.window).spread

    @property
    def distance(self) -> int:
        """How many knobs differ from the reference: the fewer, the simpler."""
        return sum(self.knobs.get(k) != v for k, v in REFERENCE.items())


@dataclass(frozen=True)
class Ranked:
    rank: int  # 1 = kept first within its precision
    timing: Timing
    tied_with: tuple[dict, ...] = ()  # the combinations still unranked it tied with (and was preferred to)


def _ties(first: Timing, other: Timing, floor: float) -> bool:
    noise = max(floor, first.spread, other.spread)
    return other.median_ms <= first.median_ms * (1 + noise)


def rank_precision(timings: list[Timing], floor: float = NOISE_FLOOR) -> list[Ranked]:
    """Rank one precision's verified combinations: repeatedly take the fastest left, and among the
    ones within noise of it, the one closest to the reference (then the faster)."""
    left = sorted(timings, key=lambda t: t.median_ms)
    ranked: list[Ranked] = []
    while left:
        tied = [t for t in left if _ties(left[0], t, floor)]
        pick = min(tied, key=lambda t: (t.distance, t.median_ms))
        others = tuple(t.knobs for t in tied if t is not pick)
        ranked.append(Ranked(len(ranked) + 1, pick, others))
        left.remove(pick)
    return ranked


def outpaced(times: dict[str, tuple[float, ...]], keep: int, margin: float = TIE_MARGIN) -> dict[str, str]:
    """Racing: the candidates of one precision that can no longer be among its `keep` fastest, each
    with why. Noise only adds time, so a candidate's fastest repeat bounds its step time from above;
    from below, that fastest less the noise its repeats showed (`Timing.spread`, at least `margin`). A candidate whose
    lower bound is more than `margin` over the `keep`-th best upper bound is provably behind by more
    than a tie. A candidate timed once is never dropped: one step shows no noise, and single steps
    were seen 7.8x their model's speed (the quickstart's reference on a 2-core host, 233 ms against
    30, its untimed step already run)."""
    uppers = sorted(min(t) for t in times.values())
    if len(uppers) <= keep:
        return {}
    bar = uppers[keep - 1]
    dropped = {}
    for key, repeats in times.items():
        if len(repeats) < 2:
            continue
        noise = max(margin, Timing({}, repeats).spread)
        lower = min(repeats) / (1 + noise)
        if lower > bar * (1 + margin):
            dropped[key] = (
                f"fastest {min(repeats):.3g} ms in {len(repeats)} timing(s), so at least {lower:.3g} ms (less {noise:.0%} noise): "
                f"over the {_nth(keep)} fastest's {bar:.3g} ms by more than the {margin:.0%} tie margin"
            )
    return dropped


def _nth(n: int) -> str:
    return {1: "1st", 2: "2nd", 3: "3rd"}.get(n, f"{n}th")


def kept_of(ranked: dict[str, list[Ranked]], keep: int) -> list[dict]:
    """The `keep` first of each precision, as stored in the study."""
    return [
        {"knobs": r.timing.knobs, "rank": r.rank, "step_ms": r.timing.median_ms, "spread": r.timing.spread}
        for rows in ranked.values()
        for r in rows[:keep]
    ]


def rejected_lines(rows: list[dict], systems: dict[str, list]) -> list[str]:
    """One line per searched knob value that no verified combination contains: why it was rejected
    (the verdict of the first combination with it)."""
    lines = []
    for knob, values in systems.items():
        for value in values:
            with_it = [r for r in rows if r["knobs"][knob] == value]
            if with_it and not any(r["verdict"] == "ok" for r in with_it):
                lines.append(f"{knob}={value}: {with_it[0]['verdict']}")
    return lines
