"""Run a study from its search space: what `hpo run` does, as a library call (`hpo.run_study`).

Create or resume the study, check what this machine can run, make (or read) probe_first's
decision, then run the workers. `hpo run` calls `run_study` and only prints and maps the errors
below to exit codes, so a study run from Python stores the same records as one run from the shell.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hpo.config.space import SearchSpace, load_space, parse_space
from hpo.errors import UserInputError
from hpo.logging import get_logger
from hpo.masking import mask_secrets
from hpo.storage import default_storage
from hpo.strategy._errors import WorkersFailed

if TYPE_CHECKING:
    import optuna

__all__ = ["as_space", "ready_to_run", "run_study"]

_log = get_logger(__name__)


def as_space(space: SearchSpace | Mapping[str, Any] | str | Path) -> SearchSpace:
    """A search space from a file path, a dict shaped as a search-space file, or a parsed space."""
    if isinstance(space, SearchSpace):
        return space
    if isinstance(space, Mapping):
        return parse_space(dict(space), source="<dict>")
    if isinstance(space, str | Path):
        return load_space(space)
    raise UserInputError(f"space must be a file path, a dict or a SearchSpace, got {type(space).__name__}")


def run_study(
    space: SearchSpace | Mapping[str, Any] | str | Path,
    *,
    storage: str | None = None,
    study_name: str | None = None,
    n_trials: int | None = None,
    workers: int | None = None,
    timeout: float | None = None,
    in_process: bool = False,
    say: Callable[[str], None] | None = None,
) -> optuna.Study:
    """Run a study as `hpo run` does, and return it.

    Args:
        space: a search-space file's path, a dict with the file's sections (`study`, `workload`,
            `params`, `systems`), or a parsed `SearchSpace`.
        storage: an Optuna storage URL; default `sqlite:///studies/<study name>.db`.
        study_name: default the space's `study.name`. A study of that name is resumed: its space
            must be the same.
        n_trials: the study's trial budget; default the space's `study.n_trials`.
        workers: local workers; default one per visible GPU, else 1 (this process); 0 only creates
            or resumes the study, for workers started elsewhere (`hpo worker`).
        timeout: seconds after which the workers start no new trial; default `study.timeout`.
        in_process: run each trial in this process rather than in a fresh child (faster to start;
            a crash or a poisoned device then ends this process).
        say: where progress lines go (the study's URL, probe_first's decision); default hpo's
            logger at INFO (`hpo.logging`).

    Raises:
        hpo.errors.UserInputError: a bad space, flag or storage URL, before anything is stored.
        hpo.runtime.NothingRunsHere: no knob combination can run on this machine (`lines` says why).
        hpo.strategy.NothingVerified: `study.strategy: probe_first` verified no combination.
        hpo.strategy.WorkersFailed: a local worker failed; the study holds the others' trials.
    """
    space, say = as_space(space), say or _log.info
    if workers is not None and workers < 0:
        raise UserInputError(f"--workers must be >= 0 (0: create or resume the study only), got {workers}")
    name = study_name or space.study.name
    url = storage or default_storage(name)
    if workers != 0:
        _start_early(space, url, workers, in_process)
    study = _create(space, url, name, n_trials, say)  # Optuna's imports overlap the forkserver's start
    if workers == 0:
        return study
    _run_workers(study, space, url, workers, timeout, in_process, say)
    return study


def _start_early(space: SearchSpace, url: str, workers: int | None, in_process: bool) -> None:
    """The workers' forkserver starts warming up while the study is created."""
    from hpo.runtime import start_early
    from hpo.workloads.catalog import fetch_checkpoints

    fetch_checkpoints(space)  # before the forkserver's warm-up loads the model
    start_early(space, url, workers, isolate=not in_process)


def _run_workers(
    study: optuna.Study, space: SearchSpace, url: str, workers: int | None, timeout: float | None, in_process: bool, say
) -> None:
    """Check the machine and make probe_first's decision, then run the workers; `WorkersFailed` if some failed."""
    from hpo.runtime import default_workers, gpus_per_trial, run_workers

    per_trial = gpus_per_trial(space)
    here = (workers or default_workers(per_trial)) == 1  # the one worker is this process
    ready_to_run(study, space, in_child=not (here and in_process), url=url if here else None, say=say)
    timeout = timeout if timeout is not None else space.study.timeout
    failed = run_workers(study, url, workers=workers, timeout=timeout, isolate=not in_process, per_trial=per_trial)
    if failed:
        raise WorkersFailed(failed, study)


def _create(space: SearchSpace, url: str, name: str, n_trials: int | None, say: Callable[[str], None]) -> optuna.Study:
    """The study created or resumed, once its sampler's packages are known to be installed."""
    from hpo.study import SAMPLER_NOTES, create_or_resume, sampler_requirements

    needs = {r.name: r for r in sampler_requirements()}[space.study.sampler.name]
    if not needs.usable:  # checked before anything is stored: every trial would fail otherwise
        raise UserInputError(f"study.sampler.name: {needs.name} {needs.why}")
    study = create_or_resume(space, url, name, n_trials=n_trials)
    say(f"study {name!r} in {mask_secrets(url)}")
    note = SAMPLER_NOTES.get(space.study.sampler.name)
    if note:
        say(f"sampler {space.study.sampler.name}: {note}")
    return study


def ready_to_run(
    study: optuna.Study, space: SearchSpace, *, in_child: bool, url: str | None, say: Callable[[str], None] | None = None
) -> None:
    """Before a worker's first trial: raise `NothingRunsHere` when no knob combination can run on
    this machine (`hpo.runtime._machine_check`), then make or read probe_first's decision
    (`decide`; `NothingVerified` when it verified none). `hpo run` and `hpo worker` both call it."""
    from hpo.runtime import NothingRunsHere, check_machine
    from hpo.strategy._probe_first import decide
    from hpo.verify.machine import nothing_left
    from hpo.workloads.catalog import fetch_checkpoints

    fetch_checkpoints(space)  # a hub id the cache lacks, once, before this worker's first trial
    check = check_machine(space, in_child=in_child, storage_url=url)
    if nothing_left(space.checked_systems, check.parts()):
        raise NothingRunsHere(check)
    decide(study, space, say=say)
