"""The Optuna objective: config from the trial, execute it, record everything on the trial.

A trial that did not train normally is COMPLETE with a violated constraint (`verdict` = 1.0) and a
placeholder value, so TPE, NSGA-II and GP learn to avoid its region (Optuna ignores FAIL trials:
optuna/optuna#2864). The placeholder is the worst feasible value so far (0.0 before any): read
`verdict`, never the value. Divergence and pruning end as PRUNED, as the pruner expects.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import optuna

from hpo.errors import PrunedByPruner
from hpo.execution.executor import execute
from hpo.progress import eval_line
from hpo.space.loader import SearchSpace
from hpo.space.suggest import suggest_config
from hpo.verify.cache import StudyVerdicts

CONSTRAINT = "verdict"


class Objective:
    def __init__(self, space: SearchSpace, on_start: Callable[[optuna.Trial], None] | None = None):
        self.space, self.on_start = space, on_start

    def __call__(self, trial: optuna.Trial) -> list[float] | float:
        if self.on_start is not None:
            self.on_start(trial)
        config = suggest_config(trial, self.space)
        on_eval = _reporter(trial, config.objectives, config.training.max_steps)
        outcome = execute(config, StudyVerdicts(trial.study), on_eval=on_eval)
        for key, value in outcome.attrs.items():
            trial.set_user_attr(key, value)
        trial.set_user_attr("verdict", outcome.verdict)
        feasible = outcome.ok or outcome.pruned
        trial.set_constraint(CONSTRAINT, 0.0 if feasible else 1.0)
        if outcome.pruned or outcome.verdict.startswith("diverged"):
            raise optuna.TrialPruned(outcome.verdict)
        values = outcome.values if outcome.ok else _placeholder(trial.study)
        return values[0] if len(values) == 1 else values


def _reporter(trial: optuna.Trial, objectives: tuple[str, ...], max_steps: int):
    def on_eval(step: int, metrics: dict[str, float]) -> None:
        eval_line(trial.number, step, max_steps, metrics)
        if len(objectives) != 1:
            return  # Optuna prunes single-objective studies only
        trial.report(metrics[objectives[0]], step)
        if trial.should_prune():
            raise PrunedByPruner(step)

    return on_eval


def _placeholder(study: optuna.Study) -> list[float]:
    feasible = [
        t for t in study.get_trials(deepcopy=False, states=[optuna.trial.TrialState.COMPLETE])
        if t.user_attrs.get("verdict") == "ok" and t.values
    ]
    values = []
    for i, direction in enumerate(study.directions):
        seen = [t.values[i] for t in feasible if math.isfinite(t.values[i])]
        worst = max if direction == optuna.study.StudyDirection.MINIMIZE else min
        values.append(worst(seen) if seen else 0.0)
    return values


