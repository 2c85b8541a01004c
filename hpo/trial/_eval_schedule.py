"""When a trial evaluates, and the step it reports each evaluation under (`hpo.trial._trainer`)."""

from __future__ import annotations

from hpo.config.trial import TrainingConfig

__all__ = ["EvalSchedule"]


class EvalSchedule:
    """When to evaluate, and the step under which the evaluation is reported to the pruner.

    Fixed length: every `eval_every` steps, reported at the step count. Time budget: at the same
    marks of training time for every trial (every `eval_marks_s`), reported at the mark in
    milliseconds, so a pruner compares trials at equal training time, not at equal steps."""

    def __init__(self, training: TrainingConfig):
        self.training, self.next_mark = training, training.eval_marks_s

    def wants(self, steps: int, train_s: float) -> bool:
        """Whether an evaluation may be due after `steps` steps and `train_s` seconds (no change)."""
        marks = self.training.eval_marks_s
        return steps % self.training.eval_every == 0 if marks is None else train_s >= self.next_mark

    def due(self, steps: int, train_s: float) -> int | None:
        """The report step if an evaluation is due after `steps` steps and `train_s` seconds."""
        marks = self.training.eval_marks_s
        if marks is None:
            return steps if steps % self.training.eval_every == 0 else None
        if train_s < self.next_mark:
            return None
        mark = self.next_mark
        while self.next_mark <= train_s:  # one long step may pass several marks: evaluate once
            self.next_mark += marks
        return round(1000 * min(mark, self.training.budget_s))

    def final(self, steps: int, train_s: float) -> int:
        """The report step of the last evaluation (budget spent, max_steps reached, or target met)."""
        if self.training.eval_marks_s is None:
            return steps
        spent = train_s >= self.training.budget_s
        return round(1000 * (self.training.budget_s if spent else train_s))
