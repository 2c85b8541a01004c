"""`hpo validate`, `run`, `worker`, `probe` and `enqueue`: the commands that make and run a study."""

from __future__ import annotations

import sys

from hpo.app.command_io import first_line, show, show_trials, storage_url
from hpo.app.output import enqueued_json, knob_row_json
from hpo.errors import ExitCode, NoKnobsRunHere, UserInputError
from hpo.masking import mask_secrets


def cmd_validate(args) -> int:
    from hpo.config.space import load_space

    space = load_space(args.space)
    searched = [k for k, v in space.systems.items() if len(v) > 1]
    searched += [f"parallel.{k}" for k, v in space.parallel.items() if len(v) > 1]
    summary = {"file": args.space, "study": space.study.name, "workload": space.spec.workload.name}
    summary |= {"params": list(space.params), "searched_knobs": searched}
    show(
        args,
        summary,
        f"{args.space}: ok (study {space.study.name!r}, workload {space.spec.workload.name!r}, "
        f"{len(space.params)} params, searched knobs: {searched})",
    )
    return ExitCode.OK


def cmd_run(args) -> int:
    from hpo.config.space import load_space
    from hpo.strategy import WorkersFailed  # torch-free: nothing is imported before the forkserver starts

    space = load_space(args.space)
    name = args.study or space.study.name
    try:
        study = _run_study(args, space, name)
    except NoKnobsRunHere as exc:
        return _nothing_left(f"study {name!r}", exc)
    except WorkersFailed:
        return ExitCode.WORKER_FAILED
    if args.workers == 0:  # workers elsewhere (a cluster job) run it
        print(f"study {name!r} is ready: start workers with HPO_STORAGE set and `hpo worker --study {name}`", file=sys.stderr)
        return ExitCode.OK
    return _show_best(args, study)


def _run_study(args, space, name: str):
    """The study after `hpo run`'s workers ran it (or only created, with --workers 0)."""
    from hpo.strategy import run_study

    return run_study(
        space,
        storage=storage_url(args, name),
        study_name=name,
        n_trials=args.n_trials,
        workers=args.workers,
        timeout=args.timeout,
        in_process=args.in_process,
        say=_say,
    )


def _show_best(args, study) -> int:
    """The best trials when the run ends; an exit code of its own when no trial trained."""
    from hpo.reporting import best_trials

    try:
        best = best_trials(study)
    except UserInputError as exc:  # every trial failed, was rejected or was pruned
        print(f"no best trial: {exc}", file=sys.stderr)
        return ExitCode.NO_TRIAL_TRAINED
    show_trials(args, study, best, "Pareto front")
    return ExitCode.OK


def cmd_worker(args) -> int:
    from hpo.app.best_and_export import open_study
    from hpo.strategy import ready_to_run

    if not args.storage:
        raise UserInputError("--storage is required (or set HPO_STORAGE): the study's shared database URL")
    study = open_study(args.study, args.storage)
    from hpo.study import space_of

    space, who = space_of(study), f"hpo worker: study {args.study!r}"
    try:
        ready_to_run(study, space, in_child=not args.in_process, url=args.storage)
    except NoKnobsRunHere as exc:
        return _nothing_left(who, exc)
    return _work_on(args, study)


def _work_on(args, study) -> int:
    """Run the study's trials until its budget is spent; a failure of this worker or of the storage
    is one line and its exit code."""
    import optuna
    import sqlalchemy.exc

    from hpo.runtime import TrialsCannotStart, run_worker

    try:
        run_worker(study, args.storage, timeout=args.timeout, isolate=not args.in_process)
    except TrialsCannotStart as exc:  # this worker could not run trials; the study goes on without it
        print(f"hpo worker: error: {mask_secrets(str(exc))}", file=sys.stderr)
        return ExitCode.WORKER_FAILED
    except (sqlalchemy.exc.SQLAlchemyError, optuna.exceptions.StorageInternalError) as exc:  # storage lost
        print(f"hpo worker: error: the storage failed ({first_line(exc)}); its trial is retried once stale", file=sys.stderr)
        return ExitCode.STORAGE_UNREACHABLE
    return ExitCode.OK


def _say(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def _nothing_left(who: str, exc: NoKnobsRunHere) -> int:
    """No knob combination is left to run: none can run on this machine (`NothingRunsHere`), or
    probe_first's opening sweep verified none (`NothingVerified`); its headline, then one line per
    value that cannot run."""
    print(f"{who}: {exc.headline}", file=sys.stderr)
    print(str(exc), file=sys.stderr)
    return exc.exit_code


def cmd_probe(args) -> int:
    import dataclasses

    from hpo.config.space import load_space
    from hpo.strategy import table
    from hpo.verdicts import Verdict
    from hpo.workloads.catalog import fetch_checkpoints

    space = load_space(args.space)
    fetch_checkpoints(space)
    rows = _sweep_with_progress(space, _verdict_store(args, space), fresh=args.fresh)
    show(args, [knob_row_json(dataclasses.asdict(r)) for r in rows], table(rows))
    if not any(Verdict.parse(r.verdict).ok for r in rows):
        print(f"no knob combination of {args.space} can run here: see the verdicts above", file=sys.stderr)
        return ExitCode.NO_KNOBS_RUN_HERE
    return ExitCode.OK


def _verdict_store(args, space):
    """Where `hpo probe` keeps its verdicts: the study's, with --study or --storage; else in memory."""
    from hpo.verify.stored import MemoryVerdicts, StudyVerdicts

    if not (args.study or args.storage):
        return MemoryVerdicts()
    from hpo.study import create_or_resume

    name = args.study or space.study.name
    return StudyVerdicts(create_or_resume(space, storage_url(args, name), name))


def _sweep_with_progress(space, store, fresh: bool) -> list:
    """Every knob combination of the space probed, a progress bar on stderr counting them."""
    from tqdm import tqdm

    from hpo.strategy import combinations, sweep
    from hpo.verify.stored import MachineFacts

    with tqdm(total=len(combinations(space)), desc="probing knob combinations", unit="combo", file=sys.stderr) as bar:
        return sweep(space, store, on_row=lambda row: bar.update(1), machine=MachineFacts(fresh=fresh), confirm_facts=True)


def cmd_enqueue(args) -> int:
    if args.from_study is not None:
        from hpo.app.warm import enqueue_from_study

        if args.study is None:
            raise UserInputError("--from-study needs --study NAME: the study to warm-start")
        if args.config is not None:
            raise UserInputError(f"{args.config}: give a CONFIG or --from-study, not both")
        return enqueue_from_study(args, storage_url(args, args.from_study), storage_url(args, args.study))
    if args.config is None or args.study is None:
        raise UserInputError("hpo enqueue takes --study NAME CONFIG.yaml, or --study B --from-study A [--top K]")
    from hpo.study import enqueue_file

    params = enqueue_file(args.config, args.study, storage_url(args, args.study))
    show(
        args,
        [enqueued_json(args.study, args.config, params)],
        f"{args.config} enqueued in study {args.study!r} as a waiting trial with params {params}; its next worker runs it first",
    )
    return ExitCode.OK
