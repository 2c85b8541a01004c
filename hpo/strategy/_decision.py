"""probe_first's decision, as the study stores it (`hpo.reporting.KEPT_ATTR`, whose
note shows it): from the sweep's rows, each precision's verified combinations raced
(`hpo.strategy._race`), ranked (`hpo.strategy._ranking`), and the `keep_fastest` first of each kept.
"""

from __future__ import annotations

import time

from hpo.config.space import SearchSpace
from hpo.strategy._race import POLICY, Race, raced_times
from hpo.strategy._ranking import TIE_MARGIN, Timing, kept_of, rank_precision, rejected_lines
from hpo.strategy._rows import SweepRow, table
from hpo.strategy._warm_models import WarmModels, knobs_key
from hpo.verify.stored import MachineFacts

__all__ = ["make_decision"]


def make_decision(
    space: SearchSpace,
    rows: list[SweepRow],
    keep: int,
    measure=None,
    machine: MachineFacts | None = None,
    warm: WarmModels | None = None,
) -> dict:
    """Rank the verified rows per precision on raced timings; keep `keep` of each. The race starts
    from each row's own timing in the sweep (`SweepRow.steps_ms`) and times again only what could
    still be among the kept (`raced_times`). Rows this machine already raced (`known_ms`) are
    confirmed by one timing of their precision's front runners instead; with `machine`, each row's
    raced times are stored for the next study. `warm` holds the sweep's timed models for the race."""
    by_precision = _verified_by_precision(rows)
    started = time.perf_counter()
    groups = {p: [r.knobs for r in group] for p, group in sorted(by_precision.items())}
    prior = {knobs_key(r.knobs): tuple(r.known_ms) for r in rows if r.known_ms}
    first = {knobs_key(r.knobs): tuple(r.steps_ms) for r in rows if r.steps_ms}
    race = raced_times(space, groups, keep, measure, prior, first, warm)
    if machine is not None:
        _store_raced(machine, rows, race)
    ranked = {
        precision: rank_precision([Timing(r.knobs, race.times[knobs_key(r.knobs)]) for r in group])
        for precision, group in sorted(by_precision.items())
    }
    return _decision(space, rows, keep, race, ranked, started)


def _verified_by_precision(rows: list[SweepRow]) -> dict[str, list[SweepRow]]:
    by_precision: dict[str, list[SweepRow]] = {}
    for row in rows:
        if row.verdict == "ok":
            by_precision.setdefault(row.knobs["precision"], []).append(row)
    return by_precision


def _store_raced(machine: MachineFacts, rows: list[SweepRow], race: Race) -> None:
    """Each row's raced times into this machine's facts, for the next study's race."""
    for row in rows:
        if row.machine_key and knobs_key(row.knobs) in race.times:
            machine.update(row.machine_key, raced_ms=list(race.times[knobs_key(row.knobs)]))


def _decision(space: SearchSpace, rows: list[SweepRow], keep: int, race: Race, ranked: dict, started: float) -> dict:
    """The decision as stored: what is kept, the ranking and the race that made it, what was rejected."""
    return {
        "kept": kept_of(ranked, keep),
        "table": table(rows),
        "ranking": [_ranking_line(p, r) for p, rs in ranked.items() for r in rs],
        "rejected": rejected_lines([{"knobs": r.knobs, "verdict": r.verdict} for r in rows], space.systems),
        "keep_fastest": keep,
        "timing": POLICY.record(),
        "timed_again_s": time.perf_counter() - started,
        "timings": sum(race.timed.values()),
        "tie_margin": TIE_MARGIN,
        "dropped": race.dropped,
        "confirmed": race.confirmed,
        "discarded": race.discarded,
        "from_machine": sum(r.from_machine for r in rows),
    }


def _ranking_line(precision: str, ranked) -> dict:
    timing = ranked.timing
    return {
        "precision": precision,
        "rank": ranked.rank,
        "knobs": timing.knobs,
        "step_ms": timing.median_ms,
        "spread": timing.spread,
        "times_ms": list(timing.times_ms),  # the repeats it was ranked on: how a tie came about
        "tied_with": [knobs_key(k) for k in ranked.tied_with],
    }
