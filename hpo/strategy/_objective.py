"""`hpo.Objective`: one Optuna trial with hpo's probe, verdicts and records, for a study the user
drives with `optuna.create_study(...).optimize(...)`, their own sampler, pruner and callbacks."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hpo.config.space import SearchSpace
from hpo.errors import UserInputError
from hpo.logging import get_logger
from hpo.strategy._run import as_space

if TYPE_CHECKING:
    import optuna

__all__ = ["Objective"]

_log = get_logger(__name__)


class Objective:
    """An Optuna objective that runs one hpo trial: the trial's config is suggested from the search
    space, its knobs verified by the probe (or a verdict the study already cached) before it trains,
    and every record `hpo run` writes is set on the trial (the same user attrs).

    A rejected trial ends as `hpo run`'s does. A knob verdict (`incompatible`, `slow`, `oom`,
    `mismatch`) ends COMPLETE with the worst value and a violated constraint (1.0, which Optuna's
    samplers read from the trial), so the sampler learns to avoid its region. Divergence and a
    pruner's stop raise `optuna.TrialPruned` (PRUNED). An error that proves nothing about the knobs
    (a bug, a transient device error) records its verdict, traceback and signature on the trial and
    is raised, so Optuna ends the trial FAIL: pass `catch=(Exception,)` to `optimize` to go on, as
    `hpo run` does. No retry is queued (the user owns the loop: Optuna's
    `RetryFailedTrialCallback` retries), and `study.trial_timeout_s` is enforced by hpo's workers
    only, not here.

    The study's directions must be the space's (`directions`). Under `study.strategy: probe_first`
    the first trial of each study runs the opening sweep (or waits for it, or reads its stored
    decision) before it trains, as `hpo run` does before its first trial.

    Example::
        objective = hpo.Objective("search_spaces/quickstart.yaml")
        study = optuna.create_study(directions=objective.directions, sampler=optuna.samplers.TPESampler())
        study.optimize(objective, n_trials=8, callbacks=[my_callback], catch=(Exception,))
    """

    def __init__(self, space: SearchSpace | Mapping[str, Any] | str | Path):
        """`space`: a search-space file's path, a dict with the file's sections, or a parsed space."""
        from hpo.runtime import GuardedObjective, keeps_references, worker_name
        from hpo.study import WorkerObjective  # imports torch
        from hpo.verify.probing import ReferenceMemory

        self.space = as_space(space)
        # Every trial runs in this process: the probes' reference steps stay in its memory.
        references = ReferenceMemory() if keeps_references(self.space) else None
        self._trial = GuardedObjective(WorkerObjective(self.space, references=references), worker=worker_name(), retry=False)
        self._ready: set[tuple[int, str]] = set()  # the studies checked (and decided for): (storage, name)

    @property
    def directions(self) -> list[str]:
        """The space's `study.directions`, one per objective: pass them to `optuna.create_study`."""
        return list(self.space.study.directions)

    @property
    def metric_names(self) -> list[str]:
        """The space's `study.objectives`, for `study.set_metric_names`."""
        return list(self.space.study.objectives)

    def __call__(self, trial: optuna.Trial) -> float | list[float]:
        """Run `trial`: its value, or one per objective. Raises `optuna.TrialPruned` for divergence
        and a pruner's stop, the error for a failure that is no verdict (`hpo.errors.TrialError`),
        and `UserInputError` before any work when the study's directions are not the space's."""
        self._before_first_trial(trial.study)
        return self._trial(trial)

    def _before_first_trial(self, study: optuna.Study) -> None:
        from hpo.storage import storage_of

        key = (id(storage_of(study)), study.study_name)
        if key in self._ready:
            return
        asked = [d.name.lower() for d in study.directions]
        if asked != self.directions:
            raise UserInputError(
                f"the study's directions must be the space's study.directions {self.directions}, got {asked}; "
                "create it with optuna.create_study(directions=objective.directions)"
            )
        if self.space.study.strategy == "probe_first":
            from hpo.strategy._probe_first import decide

            decide(study, self.space, say=_log.info)
        self._ready.add(key)
