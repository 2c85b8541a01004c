"""The knobs of a trial that runs as several ranks, `systems.parallel.<name>`: one module each, found
here as `hpo.knobs.systems` finds the others. `systems.parallel`'s other keys (processes, backend,
collective_timeout_s, port) say how the ranks run, not what is searched: `hpo.config.trial.ParallelSettings`."""

from __future__ import annotations

from hpo.knobs.knob import ParallelKnob, knobs_in

__all__ = ["PARALLEL_KNOBS"]

# Every parallel knob, in the order configs and records list them.
PARALLEL_KNOBS: dict[str, ParallelKnob] = knobs_in(__name__, __path__)
