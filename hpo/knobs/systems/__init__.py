"""Every systems knob, one module each: `systems.<name>` is declared in `hpo.knobs.systems.<name>`.

The modules are found here, not listed: a module of this package that defines `KNOB` is a knob, and
what hpo derives from the knobs (the schema, a trial's `Knobs` and `LoaderSettings`, the records, the
exporters, the command line's lists) reads `KNOBS`. How to add one: CONTRIBUTING.md, "How to add a knob".
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

from hpo.knobs.knob import Knob, LoaderKnob, knobs_in
from hpo.knobs.model_hooks import Hooked, fills_in

__all__ = [
    "KNOBS",
    "LOADER_KNOBS",
    "TRIAL_KNOBS",
    "applied_to_process",
    "entered",
    "knob",
    "model_hooks",
    "read_in_step",
    "step_settings",
]


# Every knob, in the order configs, records and tables list them (the ranks' knobs, under
# `systems.parallel`, are `hpo.knobs.systems.parallel`'s).
KNOBS: dict[str, Knob] = knobs_in(__name__, __path__)
# The knobs a trial's `Knobs` holds (model, optimizer, process): what the probe compares with its reference.
TRIAL_KNOBS: dict[str, Knob] = {name: k for name, k in KNOBS.items() if not isinstance(k, LoaderKnob)}
# The input-pipeline settings (`LoaderSettings`): what the loader check proves.
LOADER_KNOBS: dict[str, LoaderKnob] = {name: k for name, k in KNOBS.items() if isinstance(k, LoaderKnob)}


def knob(name: str) -> Knob:
    """The knob `systems.<name>`; an unknown name raises an error naming the known ones."""
    if name not in KNOBS:
        raise KeyError(f"knob must be one of {list(KNOBS)}, got {name!r}")
    return KNOBS[name]


def applied_to_process(knobs: dict[str, Any], device_type: str) -> contextlib.AbstractContextManager:
    """Every knob's setting around a step for `knobs` (`Knob.applied`: a process knob's, the pinned
    attention kernel), in force inside and restored after: what a trial's steps run under, per trial
    rather than for the whole process."""
    return entered(step_settings(knobs), device_type)


def step_settings(knobs: dict[str, Any]) -> list[tuple[Knob, Any]]:
    """The knobs of `knobs` that have a setting around the step, each with its value; a knob whose
    `applied` is the default and whose hook has no `around_step` has none."""
    return [(TRIAL_KNOBS[name], value) for name, value in knobs.items() if _sets_around_step(TRIAL_KNOBS[name])]


def _sets_around_step(k: Knob) -> bool:
    return type(k).applied is not Knob.applied or fills_in(k.model_hook(), "around_step")


@contextlib.contextmanager
def entered(settings: list[tuple[Knob, Any]], device_type: str) -> Iterator[None]:
    """The `step_settings` in force inside, restored after (a step enters them made once, not per step)."""
    with contextlib.ExitStack() as stack:
        for k, value in settings:
            stack.enter_context(k.applied(value, device_type))
        yield


def model_hooks(knobs: dict[str, Any]) -> list[Hooked]:
    """Each knob of `knobs` with its hook and value, in `position` order: the order in which every
    stage of assembling a model runs them (`hpo.knobs.model_hooks`)."""
    ordered = sorted((TRIAL_KNOBS[name] for name in knobs), key=lambda k: k.position)
    return [(k.name, k.model_hook(), knobs[k.name]) for k in ordered]


def read_in_step(knobs: dict[str, Any], device_type: str) -> dict[str, Any]:
    """Each knob's setting as a step sees it, read inside the step (`Knob.read_in_step`)."""
    return {name: TRIAL_KNOBS[name].read_in_step(device_type) for name in knobs}
