"""The worker asks the sampler; its trial process runs the trial it is handed.

Optuna's storage cache lives in one process. A trial process that asked the sampler itself would
read every trial of the study first (its cache starts empty): a cost that grows with the study, in
every trial (docs/scaling.md measures it). A worker lives for many trials, and its cache reads only the
trials that finished since its last ask. So the worker creates the trial (or takes a waiting retry
or enqueued config), binds its ticket on start, samples the trial's whole config with
`suggest_config`, and hands the trial id to the trial process. That process opens the same trial
(`take_trial`): its `suggest_*` calls return the stored params, and it reads no other trial. It
writes its own trial's attrs, heartbeats and result.
"""

from __future__ import annotations

import time
import warnings
from collections.abc import Callable

import optuna
from optuna.trial import TrialState

from hpo.config.space import SearchSpace
from hpo.runtime._guard import GuardedObjective, sampler_for_ticket
from hpo.runtime._ticket_claims import BindOnStart
from hpo.storage import storage_of, take_trial, trial_id_of
from hpo.study import open_hpo_study, suggest_config

__all__ = ["HandedSampler", "SamplingFailed", "TakenOver", "ask_in_worker", "open_handed"]


class SamplingFailed(Exception):
    """The worker's sampling of a trial raised: the trial is recorded FAIL with the error (its retry queued)."""

    def __init__(self, trial_id: int):
        super().__init__(f"sampling trial {trial_id} failed")
        self.trial_id = trial_id


class TakenOver(Exception):
    """The trial ended elsewhere while its worker sampled it: another worker's stale-trial sweep
    (`hpo.runtime._ticket_claims.recover`) failed it, its heartbeats having been late, and queued its retry
    or recorded why not (`hpo.storage.RetryWithRefund`). It is no longer this worker's to
    record or run."""

    def __init__(self, trial_id: int, state: TrialState):
        super().__init__(
            f"trial {trial_id} was ended ({state.name}) by another worker's stale-trial sweep while this one sampled it; "
            "its retry, if any, is that sweep's"
        )
        self.trial_id = trial_id


def ask_in_worker(
    study: optuna.Study, space: SearchSpace, serial: int, on_start: Callable[[int], None], worker: str
) -> tuple[int, float]:
    """Create the ticket's trial and sample all its params in the worker; returns (trial id, seconds
    it took). `on_start(trial_id)` runs as soon as the trial exists (it binds the ticket, and may
    raise `ClaimLost`). A sampling error is the trial's, as it was in the trial process
    (`GuardedObjective`: error verdict and traceback, retry queued), and the trial ends FAIL. A
    trial another worker failed meanwhile raises `TakenOver`: its sampling can only fail then, and
    telling it FAIL again would raise (seen on CI: `hpo worker` exited 70 on "Cannot tell a FAIL trial")."""
    study.sampler = BindOnStart(sampler_for_ticket(space, serial), on_start=on_start)
    began = time.perf_counter()
    with warnings.catch_warnings():
        # Optuna warns that heartbeats belong to Study.optimize: the trial process runs the trial in it.
        warnings.filterwarnings("ignore", message="Heartbeat of storage")
        trial = study.ask()
    try:
        GuardedObjective(lambda t: suggest_config(t, space), worker=worker)(trial)
    except Exception:  # noqa: BLE001 - GuardedObjective recorded it on the trial and queued its retry
        state = storage_of(study).get_trial(trial_id_of(trial)).state
        if state.is_finished():
            raise TakenOver(trial_id_of(trial), state) from None
        study.tell(trial, state=TrialState.FAIL)
        raise SamplingFailed(trial_id_of(trial)) from None
    return trial_id_of(trial), time.perf_counter() - began


class HandedSampler(optuna.samplers.BaseSampler):
    """The trial process's sampler for a trial its worker sampled: `before_trial` reports the start,
    nothing is sampled (and nothing read to sample it), and `after_trial` is the study's sampler's."""

    def __init__(self, base: optuna.samplers.BaseSampler, on_start: Callable[[int], None]):
        self.base, self.on_start = base, on_start

    def before_trial(self, study, trial) -> None:
        self.on_start(trial_id_of(trial))

    def infer_relative_search_space(self, study, trial):
        return {}

    def sample_relative(self, study, trial, search_space):
        return {}

    def sample_independent(self, study, trial, param_name, param_distribution):
        raise RuntimeError(
            f"trial {trial.number}: param {param_name!r} was not sampled by its worker; a trial process "
            "samples nothing (hpo.runtime._handed): suggest_config must suggest every param in the worker"
        )

    def after_trial(self, study, trial, state, values) -> None:
        self.base.after_trial(study, trial, state, values)

    def reseed_rng(self) -> None:
        self.base.reseed_rng()


def open_handed(storage, study_name: str, trial_id: int, on_start: Callable[[int], None]) -> tuple[optuna.Study, SearchSpace]:
    """The study as a trial process opens it to run the trial its worker handed it: `study.optimize`
    runs that trial (`take_trial`), and `on_start(trial_id)` runs once it has it."""
    study, space = open_hpo_study(storage, study_name)
    take_trial(study, trial_id)
    study.sampler = HandedSampler(study.sampler, on_start=on_start)
    return study, space
