"""Create or resume a study from a search space: samplers and pruners by name, and a guard that a
resumed study still has the space it was created with."""

from __future__ import annotations

import json
import warnings
from collections.abc import Callable

import optuna

from hpo.errors import UserInputError
from hpo.execution.avoid import AvoidKnownFailures
from hpo.space.loader import SearchSpace, parse_space
from hpo.space.schema import PrunerSpec, SamplerSpec
from hpo.storage.open import load_study_or_none, open_storage
from hpo.storage.retry import MAX_RETRIES_ATTR, engine_of
from hpo.storage.tickets import TicketBudget

SPACE_ATTR = "hpo:space"
SPACE_FILE_ATTR = "hpo:space_file"
N_TRIALS_ATTR = "hpo:n_trials"


def _tpe(spec: SamplerSpec) -> optuna.samplers.BaseSampler:
    extra = {} if spec.n_startup_trials is None else {"n_startup_trials": spec.n_startup_trials}
    with warnings.catch_warnings():  # multivariate/group are "experimental" in Optuna, and stable in use
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        return optuna.samplers.TPESampler(seed=spec.seed, multivariate=True, group=True, **extra)


SAMPLERS: dict[str, Callable[[SamplerSpec], optuna.samplers.BaseSampler]] = {
    "tpe": _tpe,
    "random": lambda s: optuna.samplers.RandomSampler(seed=s.seed),
    "nsga2": lambda s: optuna.samplers.NSGAIISampler(seed=s.seed),
    "cmaes": lambda s: optuna.samplers.CmaEsSampler(seed=s.seed, warn_independent_sampling=False),
    "gp": lambda s: optuna.samplers.GPSampler(seed=s.seed),
}

PRUNERS: dict[str, Callable[[PrunerSpec], optuna.pruners.BasePruner]] = {
    "none": lambda s: optuna.pruners.NopPruner(),
    "median": lambda s: optuna.pruners.MedianPruner(n_warmup_steps=s.n_warmup_steps or 0),
    "hyperband": lambda s: optuna.pruners.HyperbandPruner(),
    "successive_halving": lambda s: optuna.pruners.SuccessiveHalvingPruner(),
}


def create_or_resume(space: SearchSpace, storage_url: str, study_name: str | None = None,
                     n_trials: int | None = None) -> optuna.Study:
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
