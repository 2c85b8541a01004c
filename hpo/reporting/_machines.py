"""What each machine of a study left out of its proposals, for the study's dashboard note.

A worker that finds searched knob values its machine cannot run (`hpo.runtime._machine_check`)
stores them once per machine in a study user attr, `hpo:not_runnable:<host>`, and the study note
shows every machine's lines under its own heading. They are facts about machines, not verdicts of
the study: another machine may run the same values, and no verdict is cached for them.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["NOT_RUNNABLE_PREFIX", "machine_attr", "not_runnable_note"]

NOT_RUNNABLE_PREFIX = "hpo:not_runnable:"


def machine_attr(host: str) -> str:
    return NOT_RUNNABLE_PREFIX + host


def not_runnable_note(user_attrs: Mapping[str, Any]) -> str | None:
    """The note's section: per machine, one line per value (or pair) it does not propose."""
    rows = sorted((k.removeprefix(NOT_RUNNABLE_PREFIX), v) for k, v in user_attrs.items() if k.startswith(NOT_RUNNABLE_PREFIX))
    rows = [(host, v) for host, v in rows if isinstance(v, dict) and v.get("lines")]
    if not rows:
        return None
    out = ["## Not proposed on these machines (they cannot run them)", ""]
    for host, value in rows:
        out.append(f"**{host}** ({value.get('device', 'unknown device')}):")
        out += [f"- {line}" for line in value["lines"]]
        out.append("")
    out.append("Each worker checks its own machine when it starts; `hpo doctor` there shows the same reasons.")
    return "\n".join(out)
