"""What a trial's step times add up to, attributed at each check boundary: training time and the
samples trained in it (`train_samples_per_s`), the profiled evidence step's time, and the steady
steps (after compilation and profiling) that the median step time, `steady_samples_per_s` and the
slow check read. Shared by hpo's loop and the Lightning callback.
"""

from __future__ import annotations

import statistics

__all__ = ["StepTally"]


class StepTally:
    """What the steps' times add up to, filled in at each boundary from the timer's reading."""

    def __init__(self, evidence_at: int):
        self.evidence_at, self.step_times, self.samples = evidence_at, [], 0
        self.train_samples = 0  # every step of train_s, the compiling one and its waits included
        self.train_s = self.evidence_s = 0.0
        self._ended: list[tuple[int, int]] = []  # (step, samples) of the steps not yet read

    def ended(self, step: int, samples: int) -> None:
        self._ended.append((step, samples))

    def add(self, times: list[float]) -> None:
        for (step, samples), seconds in zip(self._ended, times, strict=True):
            if step == self.evidence_at:  # the profiled step's cost is hpo's profiler, not the knobs'
                self.evidence_s = seconds
                continue
            self.train_s += seconds
            self.train_samples += samples
            if step > self.evidence_at:  # compile and profiling steps are not steady state
                self.step_times.append(seconds)
                self.samples += samples
        self._ended = []

    def train_samples_per_s(self) -> float | None:
        """Samples trained over training time: what a user gets, every wait for a batch and the
        compiling step included. None before any training step was timed (no time to divide by)."""
        return self.train_samples / self.train_s if self.train_s > 0 else None

    def steady_samples_per_s(self) -> float | None:
        """Samples per second at the median steady step: the compute's speed, which a wait that
        only some steps pay (a worker starting each epoch) does not move. None without a steady step."""
        median = statistics.median(self.step_times) if self.step_times else 0.0
        return self.samples / len(self.step_times) / median if median > 0 else None
