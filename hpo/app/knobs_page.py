"""docs/reference/knobs.md: every systems knob, from its module (`hpo.knobs.systems`)."""

from __future__ import annotations

import sys

from hpo.knobs.systems import KNOBS
from hpo.knobs.systems.parallel import PARALLEL_KNOBS

__all__ = ["knobs_page"]


def _values(knob) -> str:
    return ", ".join(f"`{knob.cli_text(v)}`" for v in knob.values) or knob.values_text


def knobs_page(note: str) -> str:
    """A table of the knobs, then each knob's module docstring: how it is applied and observed."""
    lines = ["# Systems knob reference", "", note, "", *_trial_knob_lines(), *_parallel_knob_lines()]
    return "\n".join(lines).rstrip() + "\n"


def _trial_knob_lines() -> list[str]:
    """The trial knobs' table, then a section per knob."""
    lines = [
        "Each knob is one module of `hpo/knobs/systems/`, and every line below is read from it. A knob is",
        "searched under `systems:` (a scalar is fixed, a list searched); `reference` is its value in the",
        'combination every probe compares a trial with. How to add one: CONTRIBUTING.md, "How to add a knob".',
        "",
        "| knob | values | default | reference | applied to | what it changes |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for name, knob in KNOBS.items():
        default, reference = knob.cli_text(knob.default), knob.cli_text(knob.reference)
        lines.append(f"| `{name}` | {_values(knob)} | `{default}` | `{reference}` | {knob.applies_to} | {knob.help} |")
    lines.append("")
    for name, knob in KNOBS.items():
        observed = ", ".join(f"`{field}`" for field in knob.observed_fields) or "the loader's record (`loader_observed`)"
        lines += [f"## `systems.{name}`", "", _doc(knob), "", f"Recorded as observed in: {observed}.", ""]
    return lines


def _parallel_knob_lines() -> list[str]:
    """The section of `systems.parallel`'s knobs: their table, then a subsection per knob."""
    lines = [
        "## `systems.parallel`: the knobs of a trial of several ranks",
        "",
        "Searched under `systems.parallel` beside `processes`; each acts on one strategy. Each rank records its",
        "effect in `parallel_observed`, and an effect that contradicts the request ends the trial `mismatch`.",
        "",
        "| knob | values | default | strategy | what it changes |",
        "| --- | --- | --- | --- | --- |",
    ]
    for name, knob in PARALLEL_KNOBS.items():
        default = knob.cli_text(knob.default)
        lines.append(f"| `{name}` | {_values(knob)} | `{default}` | {knob.strategy or 'chooses it'} | {knob.help} |")
    lines.append("")
    for name, knob in PARALLEL_KNOBS.items():
        lines += [f"### `systems.parallel.{name}`", "", _doc(knob), ""]
    return lines


def _doc(knob) -> str:
    return (sys.modules[type(knob).__module__].__doc__ or "").strip()
