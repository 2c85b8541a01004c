"""What a trial's step times add up to, attributed at each check boundary: training time, the
profiled evidence step's time, and the steady steps (after compilation and profiling) that the
median step time, samples/s and the slow check read. Shared by hpo's loop and the Lightning callback.
"""

from __future__ import annotations

__all__ = ["StepTally"]


class StepTally:
    """What the steps' times add up to, filled in at each boundary from the timer's reading."""

    def __init__(self, evidence_at: int):
        self.evidence_at, self.step_times, self.samples = evidence_at, [], 0
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
            if step > self.evidence_at:  # compile and profiling steps are not steady state
                self.step_times.append(seconds)
                self.samples += samples
        self._ended = []
