"""Create or resume a study from a search space, with its sampler (wrapped by hpo's avoidance) and
pruner, and a guard that a resumed study still has the space it was created with."""

from __future__ import annotations

import json

import optuna

from hpo.config.schema import SamplerSpec
from hpo.config.space import SearchSpace, parse_space
from hpo.errors import UserInputError
from hpo.storage.open import load_study_or_none, open_storage
from hpo.storage.optuna_compat import engine_of
from hpo.storage.retry import MAX_RETRIES_ATTR
from hpo.storage.tickets import TicketBudget
from hpo.study.avoid import AvoidKnownFailures
from hpo.study.samplers import PRUNERS, SAMPLERS

SPACE_ATTR = "hpo:space"
SPACE_FILE_ATTR = "hpo:space_file"
N_TRIALS_ATTR = "hpo:n_trials"


def create_or_resume(
    space: SearchSpace, storage_url: str, study_name: str | None = None, n_trials: int | None = None
) -> optuna.Study:
    """Create the study (once, before any worker starts) or resume it if its space is unchanged."""
    spec = space.study
    name = study_name or spec.name
    if n_trials is not None and n_trials < 1:
        raise UserInputError(f"--n-trials must be >= 1, got {n_trials}")
    fingerprint = json.loads(json.dumps(space.fingerprint(), default=str))
    storage = open_storage(storage_url, create=True)
    existing = load_study_or_none(storage, name)
    if existing is not None:
        _check_same_space(existing, fingerprint, name, space.source)
        study = load_study(storage, name, space)
        if existing.user_attrs.get(MAX_RETRIES_ATTR) != spec.max_retries:
            study.set_user_attr(MAX_RETRIES_ATTR, spec.max_retries)  # not part of the space: may change
        if n_trials:
            _tickets(storage, name).create(n_trials)  # a larger --n-trials extends the budget
        return study
    study = optuna.create_study(
        study_name=name,
        storage=storage,
        directions=list(spec.directions),
        sampler=build_sampler(spec.sampler),
        pruner=PRUNERS[spec.pruner.name](spec.pruner),
    )
    study.set_user_attr(SPACE_ATTR, fingerprint)
    study.set_user_attr(SPACE_FILE_ATTR, space.raw)
    study.set_user_attr(N_TRIALS_ATTR, n_trials or spec.n_trials)
    study.set_user_attr(MAX_RETRIES_ATTR, spec.max_retries)
    study.set_metric_names(list(spec.objectives))
    _tickets(storage, name).create(n_trials or spec.n_trials)
    return study


def _tickets(storage, name: str) -> TicketBudget:
    return TicketBudget(engine_of(storage), name)


def load_study(storage, name: str, space: SearchSpace) -> optuna.Study:
    spec = space.study
    return optuna.load_study(
        study_name=name,
        storage=storage,
        sampler=build_sampler(spec.sampler),
        pruner=PRUNERS[spec.pruner.name](spec.pruner),
    )


def build_sampler(spec: SamplerSpec) -> optuna.samplers.BaseSampler:
    return AvoidKnownFailures(SAMPLERS[spec.name](spec), seed=spec.seed)


def _check_same_space(study: optuna.Study, fingerprint: dict, name: str, source: str) -> None:
    stored = study.user_attrs.get(SPACE_ATTR)
    if stored is None:
        raise UserInputError(f"study {name!r} exists but was not created by hpo; choose another --study name")
    if stored != fingerprint:
        changed = sorted(k for k in fingerprint if fingerprint.get(k) != stored.get(k))
        raise UserInputError(
            f"study {name!r} exists with a different search space (differs in {', '.join(changed)}) "
            f"than {source}; use a new --study name or the original file"
        )


def space_of(study: optuna.Study) -> SearchSpace:
    """The search space a study was created with, so a worker needs only the study name."""
    raw = study.user_attrs.get(SPACE_FILE_ATTR)
    if raw is None:
        raise UserInputError(f"study {study.study_name!r} was not created by hpo run; start it with `hpo run SPACE.yaml`")
    return parse_space(raw, source=f"study {study.study_name!r}")


def open_hpo_study(storage, name: str) -> tuple[optuna.Study, SearchSpace]:
    """Load a study created by `hpo run`, with the sampler and pruner its space names."""
    plain = load_study_or_none(storage, name)
    if plain is None:
        raise UserInputError(f"study {name!r} not found in the storage; create it with `hpo run SPACE.yaml`")
    space = space_of(plain)
    return load_study(storage, name, space), space
