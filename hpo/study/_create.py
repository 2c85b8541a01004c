"""Create or resume a study from a search space, with its sampler (wrapped by hpo's avoidance) and
pruner, and a guard that a resumed study still has the space it was created with."""

from __future__ import annotations

import json

import optuna
import sqlalchemy as sa

from hpo.config.schema import SamplerSpec
from hpo.config.space import SearchSpace, parse_space
from hpo.errors import UserInputError
from hpo.logging import get_logger
from hpo.storage import BUDGET, MAX_RETRIES_ATTR, TicketBudget, engine_of, load_study_or_none, open_storage, storage_of
from hpo.study._avoid import AvoidKnownFailures
from hpo.study._edits import fixed_changes, setting_changes
from hpo.study._samplers import PRUNERS, SAMPLERS

_log = get_logger(__name__)

SPACE_ATTR = "hpo:space"
SPACE_FILE_ATTR = "hpo:space_file"
N_TRIALS_ATTR = "hpo:n_trials"


def create_or_resume(
    space: SearchSpace,
    storage_url: str,
    study_name: str | None = None,
    n_trials: int | None = None,
) -> optuna.Study:
    """Create the study (once, before any worker starts), or resume it: its space must be unchanged,
    and each edited setting is applied and logged in one line."""
    spec = space.study
    name = study_name or spec.name
    if n_trials is not None and n_trials < 1:
        raise UserInputError(f"--n-trials must be >= 1, got {n_trials}")
    fingerprint = json.loads(json.dumps(space.fingerprint(), default=str))
    storage = open_storage(storage_url, create=True)
    existing = load_study_or_none(storage, name)
    if existing is not None:
        return _resume(existing, space, fingerprint, n_trials)
    study = optuna.create_study(
        study_name=name,
        storage=storage,
        directions=list(spec.directions),
        sampler=build_sampler(spec.sampler),
        pruner=PRUNERS[spec.pruner.name](spec.pruner),
    )
    _describe(study, space, fingerprint, n_trials or spec.n_trials)
    _tickets(storage, name).create(n_trials or spec.n_trials)
    return study


def _describe(study: optuna.Study, space: SearchSpace, fingerprint: dict, n_trials: int) -> None:
    """What a new study stores of its space: the fingerprint a resume checks, the file, the budget."""
    study.set_user_attr(SPACE_ATTR, fingerprint)
    study.set_user_attr(SPACE_FILE_ATTR, space.raw)
    study.set_user_attr(N_TRIALS_ATTR, n_trials)
    study.set_user_attr(MAX_RETRIES_ATTR, space.study.max_retries)
    study.set_metric_names(list(space.study.objectives))


def _resume(existing: optuna.Study, space: SearchSpace, fingerprint: dict, n_trials: int | None) -> optuna.Study:
    """Every check before any write, so a refusal (exit 2) leaves the study as it was."""
    name, source = existing.study_name, space.source
    stored = _check_same_space(existing, fingerprint, space)
    changes = setting_changes(stored.spec, space.spec)
    tickets = _tickets(storage_of(existing), name)
    budget = _new_budget(tickets, n_trials, stored.study.n_trials, space.study.n_trials, name)
    study = load_study(storage_of(existing), name, space)
    told = budget is not None and _apply_budget(study, tickets, budget, name)
    if changes:
        study.set_user_attr(SPACE_FILE_ATTR, space.raw)  # what every worker and trial reads from now on
        study.set_user_attr(MAX_RETRIES_ATTR, space.study.max_retries)
    for change in changes:
        if change.key != "study.n_trials":
            _log.info(f"study {name!r}: {change} (edited in {source}; applied to workers and trials that start from now on)")
        elif not told:
            _log.info(f"study {name!r}: {change} (edited in {source}; the trial budget already is {tickets.state()[1]})")
    return study


def _new_budget(tickets: TicketBudget, flag: int | None, stored_n: int, file_n: int, name: str) -> int | None:
    """The budget asked for: --n-trials, else the file's n_trials when it was edited; None to keep
    it (a plain resume). It cannot drop below the trials already claimed: those ran or are running."""
    wanted = flag if flag is not None else (file_n if file_n != stored_n else None)
    if wanted is None:
        return None
    claimed, budget = tickets.state()
    if wanted < claimed:
        what = "--n-trials" if flag is not None else "study.n_trials"
        raise UserInputError(
            f"{what} {wanted}: study {name!r} has already claimed {claimed} trials of its budget of {budget}; "
            f"the budget cannot drop below {claimed}: ask for {claimed} or more"
        )
    return wanted


def _apply_budget(study: optuna.Study, tickets: TicketBudget, wanted: int, name: str) -> bool:
    """Set the budget to `wanted`; whether it changed (and was logged)."""
    claimed, budget = tickets.state()
    if wanted == budget:
        return False
    tickets.create(wanted)  # creates the row of a study that has none; raises a smaller budget
    if wanted < budget and not _lower_budget(tickets, wanted):  # a worker claimed meanwhile
        claimed = tickets.state()[0]
        raise UserInputError(f"n_trials {wanted}: study {name!r} has now claimed {claimed} trials; ask for {claimed} or more")
    study.set_user_attr(N_TRIALS_ATTR, wanted)
    _log.info(f"study {name!r}: n_trials: {budget} -> {wanted} (the trial budget; {claimed} claimed so far)")
    return True


def _lower_budget(tickets: TicketBudget, wanted: int) -> bool:
    """Set the budget to `wanted` only if no more than that are claimed, atomically with claims."""
    row = sa.and_(BUDGET.c.study_name == tickets.study_name, BUDGET.c.claimed <= wanted)
    with tickets.engine.begin() as conn:
        return conn.execute(BUDGET.update().where(row).values(budget=wanted)).rowcount == 1


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


def _check_same_space(study: optuna.Study, fingerprint: dict, space: SearchSpace) -> SearchSpace:
    """The study's stored space, if the edited file makes the same study (see hpo.study._edits)."""
    stored_fingerprint = study.user_attrs.get(SPACE_ATTR)
    if stored_fingerprint is None:
        raise UserInputError(f"study {study.study_name!r} exists but was not created by hpo; choose another --study name")
    stored = space_of(study)
    if stored_fingerprint != fingerprint:
        differs = sorted(k for k in fingerprint if fingerprint.get(k) != stored_fingerprint.get(k))
        first = next(iter(fixed_changes(stored.spec, space.spec)), None)
        raise UserInputError(
            f"study {study.study_name!r} exists with a different search space (differs in {', '.join(differs)}) "
            f"than {space.source}{f': {first}' if first else ''}; its objectives, directions, workload, params and "
            f"knobs are fixed when it is created: use a new --study name or the original file"
        )
    return stored


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
