"""The `probe_first` decision as the study stores it (under `KEPT_ATTR`) and as its dashboard note
shows it. `hpo.strategy` writes it; the trials' suggestion (`hpo.study._suggest`), the study note
(`hpo.reporting._notes`) and the worker that shows the note after its first trial
(`hpo.runtime._workers`) read it. All three sit below `hpo.strategy`, so the record's key and its
reader live here, below them, and only its writer lives in `hpo.strategy`."""

from __future__ import annotations

from hpo.knobs.systems import TRIAL_KNOBS

# The ranking's columns after precision (the race ranks within each precision).
_OTHERS = [name for name in TRIAL_KNOBS if name != "precision"]
_OTHER_HEADERS = [TRIAL_KNOBS[name].header for name in _OTHERS]

__all__ = ["KEPT_ATTR", "decision_note"]

KEPT_ATTR = "hpo:probe_first"  # {"kept": [...], "table": str, "notes": [...]}: the decision


def decision_note(decided: dict) -> str:
    """The study's note: the sweep's table, the ranking it was decided from, and what was kept."""
    lines = ["## Knobs decided by the opening sweep (study.strategy: probe_first)", "", "```", decided["table"], "```", ""]
    lines += [
        _how_raced(decided) + " Combinations within the repeats' spread (at least 5%) "
        "of each other are a tie, and a tie goes to the combination closest to fp32/eager/for-loop.",
        "",
        "| precision | rank | " + " | ".join(_OTHER_HEADERS) + " | step ms | spread | repeats ms | kept |",
        "| --- | --- | " + "--- | " * len(_OTHER_HEADERS) + "--- | --- | --- | --- |",
    ]
    lines += [_ranking_row(r, decided["keep_fastest"]) for r in decided["ranking"]]
    if decided.get("dropped"):
        lines += ["", f"Left the race (after N timings; tie margin {decided.get('tie_margin', 0.05):.0%}):"]
        lines += [f"- {_dropped(d)}" for d in decided["dropped"]]
    if decided["rejected"]:
        lines += ["", "Rejected values:", *(f"- {line}" for line in decided["rejected"])]
    return "\n".join(lines)


def _ranking_row(r: dict, keep_fastest: int) -> str:
    k, kept = r["knobs"], "yes" if r["rank"] <= keep_fastest else ""
    tie = f" tied within noise with {', '.join(r['tied_with'])}: the simpler ranks first" if r["tied_with"] else ""
    return (
        f"| {r['precision']} | {r['rank']} | {' | '.join(str(k.get(name, '')) for name in _OTHERS)} "
        f"| {r['step_ms']:.2f} | {r['spread']:.1%} | {_repeats(r)} | {kept}{tie} |"
    )


def _dropped(dropped: dict) -> str:
    k = dropped["knobs"]
    return f"{k['precision']} {k['attention']} {k['optimizer']}: after {dropped['round']}: {dropped['reason']}"


def _how_raced(decided: dict) -> str:
    if "repeats" in decided:  # a decision stored before the race started from the sweep's own timing
        return (
            f"Verified combinations within {decided.get('window', 3.0)}x of their precision's fastest in the sweep were "
            f"timed again, raced: up to {decided['repeats']} rounds interleaved across them, each dropping those that "
            f"could no longer be among the kept; {_each(decided)} ({decided.get('timed_again_s', 0):.1f} s); the others "
            "keep the sweep's timing."
        )
    timing = decided["timing"]
    return (
        "The sweep timed each verified combination with one step (after an untimed one). The race then timed "
        f"again, one step a round interleaved across them, only those that could still be among the "
        f"{decided['keep_fastest']} fastest of their precision, dropping the others, until those left were steady: "
        f"at least {timing['min_repeats']} steps whose fastest {timing['window']} agree within "
        f"{timing['steady_spread']:.0%}, at most {timing['max_repeats']} or {timing['max_timed_s']:g} s of steps "
        f"({decided.get('timings', 0)} timings, {decided.get('timed_again_s', 0):.1f} s)."
    )


def _each(decided: dict) -> str:
    """How each repeat was timed: a steady timing (an older decision: the fastest of a few steps)."""
    timing = decided.get("timing")
    if timing is None:
        return f"the fastest of {decided.get('steps', '?')} steps each"
    return (
        f"each {timing['warmup_steps']} untimed step(s), then the fastest of {timing['min_repeats']}-"
        f"{timing['max_repeats']} steps, repeated until the fastest {timing['window']} agreed within "
        f"{timing['steady_spread']:.0%}"
    )


def _repeats(ranked: dict) -> str:
    return ", ".join(f"{t:.2f}" for t in ranked.get("times_ms", [])) or "-"
