"""The one place hpo reaches into Optuna's private attributes. When Optuna changes them, this
module is the only one to mend; everything else calls these functions.

Why each is needed: Optuna has no public API for a study's storage object, a live trial's storage
id, the SQLAlchemy engine behind `RDBStorage` (hpo keeps its trial budget in the same database) or
the heartbeat settings of an opened storage, nor for running an existing trial in `Study.optimize`.
"""

from __future__ import annotations

from typing import Any

import optuna


def storage_of(study: optuna.Study) -> optuna.storages.BaseStorage:
    """The storage object a study reads and writes through."""
    return study._storage


def study_id_of(study: optuna.Study) -> int:
    return study._study_id


def trial_id_of(trial: optuna.Trial | optuna.trial.FrozenTrial) -> int:
    """The storage's id of a trial (not its per-study number)."""
    return trial._trial_id


def rdb_backend(storage: Any) -> optuna.storages.RDBStorage:
    """The RDBStorage behind a storage; Optuna wraps it in a cache layer (`_CachedStorage`)."""
    return getattr(storage, "_backend", storage)


def engine_of(storage: Any):
    """The SQLAlchemy engine behind an Optuna RDB storage."""
    return rdb_backend(storage).engine


def take_trial(study: optuna.Study, trial_id: int) -> None:
    """Make the study's `ask()` return the existing, RUNNING trial `trial_id` (its worker created it
    and sampled its params: `hpo.runtime._handed`) instead of creating one or taking a waiting one.
    `Study.optimize` then runs that trial with its heartbeat, tell, callbacks and `catch`, as for a
    trial it asked. Optuna's `ask` has no parameter for an existing trial, and its waiting-trial
    lookup would read the whole study into this process's cache."""

    def ask(fixed_distributions=None) -> optuna.Trial:
        return optuna.Trial(study, trial_id)

    study.ask = ask


def liveness(storage: Any) -> tuple[int, int]:
    """(heartbeat interval, grace period) in seconds of an opened storage."""
    backend = rdb_backend(storage)
    return backend.heartbeat_interval, backend.grace_period


def set_user_attrs(trial: optuna.Trial, attrs: dict[str, Any]) -> None:
    """Write a live trial's user attrs in one transaction: one commit per trial rather than one
    per key (about 25 a trial), which is what a busy PostgreSQL or a SQLite file on a slow disk
    feels. Optuna writes one key per call, hence its RDB internals here; any other storage gets
    the public calls."""
    backend = rdb_backend(trial.storage)
    if not isinstance(backend, optuna.storages.RDBStorage):
        for key, value in attrs.items():
            trial.set_user_attr(key, value)
        return
    from optuna.storages._rdb import models
    from optuna.storages._rdb.storage import _create_scoped_session

    with _create_scoped_session(backend.scoped_session, True) as session:
        for key, value in attrs.items():
            backend._set_trial_attr_without_commit(session, models.TrialUserAttributeModel, trial_id_of(trial), key, value)
    trial._cached_frozen_trial.user_attrs.update(attrs)  # what Trial.set_user_attr also keeps


def add_study_user_attr(study: optuna.Study, key: str, value: Any) -> bool:
    """Set a study user attr only if the study has none under `key`; False if it had one. Atomic
    in an RDB storage (Optuna's table is unique on study and key, so a second insert fails), so
    two workers recording a fact at once never overwrite each other; Optuna's own
    `set_user_attr` updates in place. Other storages are one process's: read, then write."""
    backend = rdb_backend(storage_of(study))
    if not isinstance(backend, optuna.storages.RDBStorage):
        if key in study.user_attrs:
            return False
        study.set_user_attr(key, value)
        return True
    import json

    import sqlalchemy as sa
    from optuna.storages._rdb import models

    table = models.StudyUserAttributeModel.__table__
    try:
        with backend.engine.begin() as conn:
            conn.execute(table.insert().values(study_id=study_id_of(study), key=key, value_json=json.dumps(value)))
    except sa.exc.IntegrityError:
        return False
    return True


def record_feasibility(trial: optuna.Trial, violation: float) -> None:
    """Record the trial's one constraint (> 0: infeasible) where every reader finds it.

    Optuna 5's `Trial.set_constraint(name, v)` writes the system attr `constraints:<name>`, which
    optuna-dashboard 0.21 does not read (it reads the list under `constraints`). Optuna itself still
    reads that list (as constraint "0") for its samplers, `best_trial` and plots. So the list is
    written, and only it: writing both would give every trial two constraints."""
    record_feasibility_of(trial.storage, trial_id_of(trial), violation)


def record_feasibility_of(storage: optuna.storages.BaseStorage, trial_id: int, violation: float) -> None:
    """`record_feasibility` for a trial known by its id (its worker records a trial whose process died)."""
    storage.set_trial_system_attr(trial_id, "constraints", [float(violation)])
