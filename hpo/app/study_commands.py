"""`hpo validate`, `run`, `worker`, `probe` and `enqueue`: the commands that make and run a study."""

from __future__ import annotations

import sys

from hpo.app.command_io import first_line, show, show_trials, storage_url
from hpo.app.output import enqueued_json, knob_row_json
from hpo.errors import ExitCode, UserInputError
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
    from hpo.runtime.forkserver import start_early

    space = load_space(args.space)
    if args.workers is not None and args.workers < 0:
        raise UserInputError(f"--workers must be >= 0 (0: create or resume the study only), got {args.workers}")
    name = args.study or space.study.name
    url = storage_url(args, name)
    if args.workers != 0:
        start_early(space, url, args.workers, isolate=not args.in_process)
    # Imported after that start: Optuna's imports then overlap the forkserver's.
    from hpo.reporting.ranking import best_trials
    from hpo.runtime.workers import run_workers
    from hpo.study.create import create_or_resume
    from hpo.study.samplers import SAMPLER_NOTES, sampler_requirements

    needs = {r.name: r for r in sampler_requirements()}[space.study.sampler.name]
    if not needs.usable:  # checked before anything is stored: every trial would fail otherwise
        raise UserInputError(f"study.sampler.name: {needs.name} {needs.why}")

    study = create_or_resume(space, url, name, n_trials=args.n_trials)
    print(f"study {name!r} in {mask_secrets(url)}", file=sys.stderr)
    note = SAMPLER_NOTES.get(space.study.sampler.name)
    if note:
        print(f"sampler {space.study.sampler.name}: {note}", file=sys.stderr)
    if args.workers == 0:  # workers elsewhere (a cluster job) run it
        print(f"study {name!r} is ready: start workers with HPO_STORAGE set and `hpo worker --study {name}`", file=sys.stderr)
        return ExitCode.OK
    from hpo.runtime.placement import default_workers

    here = (args.workers or default_workers()) == 1  # the one worker is this process
    if not _runnable_here(space, f"study {name!r}", in_child=not (here and args.in_process), url=url if here else None):
        return ExitCode.NO_KNOBS_RUN_HERE
    if not _probe_first(study, space, f"study {name!r}"):
        return ExitCode.NO_KNOBS_RUN_HERE
    timeout = args.timeout if args.timeout is not None else space.study.timeout
    failed = run_workers(study, url, workers=args.workers, timeout=timeout, isolate=not args.in_process)
    if failed:
        return ExitCode.WORKER_FAILED
    try:
        best = best_trials(study)
    except UserInputError as exc:  # every trial failed, was rejected or was pruned
        print(f"no best trial: {exc}", file=sys.stderr)
        return ExitCode.NO_TRIAL_TRAINED
    show_trials(args, study, best, "Pareto front")
    return ExitCode.OK


def cmd_worker(args) -> int:
    import optuna
    import sqlalchemy.exc

    from hpo.app.best_and_export import open_study
    from hpo.runtime.runners import TrialsCannotStart
    from hpo.runtime.workers import run_worker

    if not args.storage:
        raise UserInputError("--storage is required (or set HPO_STORAGE): the study's shared database URL")
    study = open_study(args.study, args.storage)
    from hpo.study.create import space_of

    space, who = space_of(study), f"hpo worker: study {args.study!r}"
    if not _runnable_here(space, who, in_child=not args.in_process, url=args.storage):
        return ExitCode.NO_KNOBS_RUN_HERE
    if not _probe_first(study, space, who):
        return ExitCode.NO_KNOBS_RUN_HERE
    try:
        run_worker(study, args.storage, timeout=args.timeout, isolate=not args.in_process)
    except TrialsCannotStart as exc:  # this worker could not run trials; the study goes on without it
        print(f"hpo worker: error: {mask_secrets(str(exc))}", file=sys.stderr)
        return ExitCode.WORKER_FAILED
    except (sqlalchemy.exc.SQLAlchemyError, optuna.exceptions.StorageInternalError) as exc:  # storage lost
        print(f"hpo worker: error: the storage failed ({first_line(exc)}); its trial is retried once stale", file=sys.stderr)
        return ExitCode.STORAGE_UNREACHABLE
    return ExitCode.OK


def _runnable_here(space, who: str, in_child: bool, url: str | None) -> bool:
    """Before the first trial: the searched knob values this machine cannot run are said, one line
    each (`hpo.runtime.machine_check`); False (exit `NO_KNOBS_RUN_HERE`) when no combination is left."""
    from hpo.runtime.machine_check import check_machine
    from hpo.verify.not_runnable import nothing_left

    check = check_machine(space, in_child=in_child, storage_url=url)
    if not nothing_left(space.checked_systems, check.parts()):
        return True
    print(f"{who}: no knob combination can run on this machine ({check.device}); not runnable here:", file=sys.stderr)
    print("\n".join(n.line() for n in check.not_runnable), file=sys.stderr)
    return False


def _probe_first(study, space, who: str) -> bool:
    """`study.strategy: probe_first`: the opening sweep (run here, or by another worker) decided the
    knobs; False (exit `NO_KNOBS_RUN_HERE`) when it verified none, after one line per rejected value."""
    from hpo.app.probe_first import NothingVerified, decide

    try:
        decide(study, space)
    except NothingVerified as exc:
        print(f"{who}: no knob combination passed the sweep (study.strategy: probe_first); rejected:", file=sys.stderr)
        print(str(exc), file=sys.stderr)
        return False
    return True


def cmd_probe(args) -> int:
    import dataclasses

    from tqdm import tqdm

    from hpo.app.sweep import combinations, sweep, table
    from hpo.config.space import load_space
    from hpo.verdicts import Verdict
    from hpo.verify.cache import MemoryVerdicts, StudyVerdicts
    from hpo.verify.machine_facts import MachineFacts

    space = load_space(args.space)
    store = MemoryVerdicts()
    if args.study or args.storage:
        from hpo.study.create import create_or_resume

        name = args.study or space.study.name
        store = StudyVerdicts(create_or_resume(space, storage_url(args, name), name))
    with tqdm(total=len(combinations(space)), desc="probing knob combinations", unit="combo", file=sys.stderr) as bar:
        rows = sweep(space, store, on_row=lambda row: bar.update(1), machine=MachineFacts(fresh=args.fresh))
    show(args, [knob_row_json(dataclasses.asdict(r)) for r in rows], table(rows))
    if not any(Verdict.parse(r.verdict).ok for r in rows):
        print(f"no knob combination of {args.space} can run here: see the verdicts above", file=sys.stderr)
        return ExitCode.NO_KNOBS_RUN_HERE
    return ExitCode.OK


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
    from hpo.study.enqueue import enqueue_file

    params = enqueue_file(args.config, args.study, storage_url(args, args.study))
    show(
        args,
        [enqueued_json(args.study, args.config, params)],
        f"{args.config} enqueued in study {args.study!r} as a waiting trial with params {params}; its next worker runs it first",
    )
    return ExitCode.OK
