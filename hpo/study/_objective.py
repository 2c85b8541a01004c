"""The Optuna objective: config from the trial, execute it, record everything on the trial.

A trial rejected by a knob verdict before or while training (`incompatible`, `slow`, `oom`,
`mismatch`) ends COMPLETE with a violated constraint (1.0), so the samplers learn to avoid its
region. A failure that proves nothing about the knobs (an error: a bug, a transient device error)
ends FAIL, which Optuna's samplers ignore (optuna/optuna#2864): a bug must not teach them that a
region is bad. Its traceback goes to stderr and, truncated, into `error_traceback`.

Its value is the worst possible one: +inf for a minimized objective, -inf for a maximized one. Any
other number would be a lie some tool believes: a "placeholder" of 0.0 was the best val_loss
possible, and even the worst value seen so far looks better than a later, worse trial that did
train. With an infinite value, no tool ranks it above a trial that trained: `study.best_trial`,
`optuna best-trial`, `hpo best` and optuna-dashboard's best trial (which ignores constraints) all
pick a trained trial whenever one exists; Optuna's importances skip non-finite values and plotly
draws no point for them, so plots are not polluted; GP clips them to the worst finite value for its
fit, which is what a failed region deserves. The constraint is written where both Optuna and
optuna-dashboard 0.21 read it (see `record_feasibility`), so the dashboard shows it too. Divergence and pruning end as PRUNED, as pruners expect.
"""

from __future__ import annotations

import time

import optuna

from hpo.config.objectives import SYSTEM_METRICS, worst_value
from hpo.config.space import SearchSpace
from hpo.config.trial import TrainingConfig
from hpo.errors import PrunedByPruner, TrialError
from hpo.records import RecordKey
from hpo.reporting import eval_line
from hpo.storage import record_feasibility, set_user_attrs
from hpo.study._suggest import suggest_config
from hpo.trial import Phases, execute, workload_metric
from hpo.verdicts import Kind
from hpo.verify.probing import KeptReferences
from hpo.verify.stored import StudyVerdicts


class WorkerObjective:
    """The objective hpo's own workers run for each Optuna trial (`hpo.Objective` is the public one,
    for a user's own `study.optimize`, and runs this one inside). `launched_at` (time.time()) is when the worker asked for this trial's process: the trial
    then records its process start as the `start` phase. `references` keeps the probes' reference
    steps for the worker's later trials (`hpo.verify.probing._kept_reference`), if it keeps them.
    `sampled_s` is how long its worker took to sample the trial's params, when it did."""

    def __init__(
        self,
        space: SearchSpace,
        launched_at: float | None = None,
        references: KeptReferences | None = None,
        sampled_s: float | None = None,
    ):
        self.space, self.launched_at, self.sampled_s = space, launched_at, sampled_s
        self.references = references

    def __call__(self, trial: optuna.Trial) -> list[float] | float:
        phases = self._phases()
        with phases("sample"):
            config = suggest_config(trial, self.space)
        on_eval = _reporter(trial, config.objectives, config.training)
        try:
            outcome = execute(config, StudyVerdicts(trial.study), on_eval, phases, self.references)
        except TrialError as exc:  # what it recorded so far, then FAIL (see GuardedObjective)
            set_user_attrs(trial, {**exc.attrs, RecordKey.VERDICT: str(exc.verdict)})
            trial.set_user_attr(RecordKey.PHASES_S, phases.record())
            raise
        with phases("storage"):
            set_user_attrs(trial, {**outcome.attrs, RecordKey.VERDICT: str(outcome.verdict)})
        trial.set_user_attr(RecordKey.PHASES_S, phases.record())  # the write above included
        feasible = outcome.verdict.feasible
        record_feasibility(trial, 0.0 if feasible else 1.0)
        if outcome.verdict.kind in (Kind.PRUNED, Kind.DIVERGED):
            raise optuna.TrialPruned(str(outcome.verdict))
        values = outcome.values if outcome.ok else [worst_value(d) for d in config.directions]
        return values[0] if len(values) == 1 else values

    def _phases(self) -> Phases:
        """The trial's phases, from the ones before it reached this process: its start, its sampling."""
        phases = Phases()
        if self.launched_at is not None:
            phases.add("start", time.time() - self.launched_at)
        if self.sampled_s is not None:  # the worker sampled this trial's params (hpo.runtime._handed)
            phases.add("sample", self.sampled_s)
        return phases


def _reporter(trial: optuna.Trial, objectives: tuple[str, ...], training: TrainingConfig):
    def on_eval(step: int, metrics: dict[str, float]) -> None:
        # Under a time budget the report step is milliseconds of training (see EvalSchedule).
        budget = training.budget_s
        where = f"step {step}/{training.max_steps}" if budget is None else f"{step / 1000:g}/{budget:g} s of training"
        eval_line(trial.number, where, metrics)
        if len(objectives) != 1 or objectives[0] in SYSTEM_METRICS:
            # Optuna prunes single-objective studies only, and a systems metric (throughput, time
            # to target) has its value only once training ends: nothing to report at an evaluation.
            return
        trial.report(workload_metric(objectives[0], metrics), step)
        if trial.should_prune():
            raise PrunedByPruner(step, in_ms=budget is not None)

    return on_eval
