"""The docs section of `bench-false-slow` from its result file: the run's provenance, the table per
side, each `slow` verdict with the plain loop's ratio, and the slowdowns hpo recorded per knob set.

    python -m benchmarks.false_slow_report benchmarks/results/false-slow-cpu-avx512bf16.json
"""

from __future__ import annotations

import json
import statistics
import sys
from collections import defaultdict
from pathlib import Path

from benchmarks.false_slow import markdown_table, slow_verdicts, summarize

__all__ = ["report"]


def _knobs(trial: dict) -> str:
    knobs = trial.get("knobs_requested") or {}
    return f"{knobs.get('precision')}, checkpointing {str(knobs.get('grad_checkpointing')).lower()}"


def _slowdowns(studies: list[dict]) -> list[str]:
    """Per side and knob set: how many trials, and the min / median / max slowdown hpo recorded."""
    seen: dict = defaultdict(list)
    for study in studies:
        for trial in study["trials"]:
            seen[(study["side"], _knobs(trial))].append(trial.get("slowdown"))
    lines = ["| side | knobs | trials | recorded slowdown min / median / max |", "|---|---|---|---|"]
    for (side, knobs), values in sorted(seen.items()):
        got = sorted(v for v in values if v is not None)
        spread = f"{got[0]:.2f} / {statistics.median(got):.2f} / {got[-1]:.2f}" if got else "none recorded"
        lines.append(f"| {side} | {knobs} | {len(values)} | {spread} |")
    return lines


def _verdicts(studies: list[dict]) -> list[str]:
    lines = []
    for study in studies:
        for trial in slow_verdicts(study):
            plain = trial.get("plain") or {}
            lines.append(
                f"- {study['side']}, seed {study['seed']}, trial {trial['number']} ({_knobs(trial)}): "
                f"`{trial['verdict']}`; plain loop {plain.get('ratio')}x, "
                f"{'false' if trial.get('false_slow') else 'confirmed' if trial.get('false_slow') is False else 'unconfirmed'}"
            )
    return lines or ["- none on either side"]


def report(result: dict) -> str:
    meta, studies = result["meta"], result["studies"]
    loads = [s["load_average_after"][0] for s in studies]
    head = [
        f"Measured {meta['date']} at commit {meta['commit']} on {meta.get('cpu_model')} "
        f"({result['spinners']} spinners; 1-minute load average after each study {min(loads):.1f}-{max(loads):.1f}), "
        f"`{meta['command']}`, {result['elapsed_s']} s.",
        "",
        markdown_table(summarize(studies)),
        "",
        "Each `slow` verdict, and the plain loop's ratio:",
        "",
        *_verdicts(studies),
        "",
        "The slowdowns hpo recorded for the trials it trained:",
        "",
        *_slowdowns(studies),
    ]
    return "\n".join(head)


if __name__ == "__main__":
    print(report(json.loads(Path(sys.argv[1]).read_text())))
