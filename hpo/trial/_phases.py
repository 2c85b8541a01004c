"""Where a trial's wall time went, phase by phase: the `phases_s` record.

A trial's fixed costs (process start, data, model build, probe, evaluation, storage) decide how many
short trials fit in an hour as much as its step time does; they are recorded so that the cost is
seen per trial, and measured by `scripts/bench-vs-hf`.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator

__all__ = ["PHASES", "Phases"]

# The phases in the order a trial passes them. `start`: from the worker's fork request to the
# objective (trial processes only). `sample`: the sampler's suggestions. `evidence`: the one
# profiled training step. `train`: the other training steps (`train_s`). `flops`: counting model
# FLOPs (once per model shape per study). `storage`: writing the trial's records.
PHASES = ("start", "sample", "data", "probe", "build", "train", "evidence", "eval", "flops", "storage")


class Phases:
    """Accumulates seconds per phase; `with phases("eval"): ...` adds the block's wall time."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}

    @contextlib.contextmanager
    def __call__(self, name: str) -> Iterator[None]:
        start = time.perf_counter()
        try:
            yield
        finally:
            self.add(name, time.perf_counter() - start)

    def add(self, name: str, seconds: float) -> None:
        if name not in PHASES:
            raise ValueError(f"phase must be one of {PHASES}, but got {name!r}")
        self.seconds[name] = self.seconds.get(name, 0.0) + seconds

    def record(self) -> dict[str, float]:
        """The phases seen, in trial order, rounded to the millisecond."""
        return {name: round(self.seconds[name], 3) for name in PHASES if name in self.seconds}
