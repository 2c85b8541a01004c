"""The `hpo` command: parse, call one library function, map errors to exit codes."""

from __future__ import annotations

import logging
import os
import sys
import traceback
import warnings
from pathlib import Path

from hpo.app.output import dumps, knob_row_json, outcome_json, trial_json, written_json
from hpo.errors import ExitCode, UserInputError
from hpo.logging import set_verbosity
from hpo.storage.urls import default_storage, mask_password


def _storage(args, study_name: str) -> str:
    return args.storage or default_storage(study_name)


def _output_file(path: str) -> Path:
    """`-o FILE`: refused before anything is read or written when its folder is missing."""
    out = Path(path)
    if out.is_dir():
        raise UserInputError(f"-o {path}: is a folder; give a file name, e.g. -o {out / 'out'}")
    if not out.parent.is_dir():
        raise UserInputError(f"-o {path}: folder {out.parent} does not exist; create it first (mkdir -p {out.parent})")
    return out


def _show(args, as_json, as_table: str) -> None:
    """The command's result on stdout, as `--format` asks: `as_json` in a shape of `hpo.app.output`."""
    print(dumps(as_json) if args.format == "json" else as_table)


def cmd_validate(args) -> int:
    from hpo.config.space import load_space

    space = load_space(args.space)
    searched = [k for k, v in space.systems.items() if len(v) > 1]
    summary = {"file": args.space, "study": space.study.name, "workload": space.spec.workload.name}
    summary |= {"params": list(space.params), "searched_knobs": searched}
    _show(
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
    url = _storage(args, name)
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
    print(f"study {name!r} in {mask_password(url)}", file=sys.stderr)
    note = SAMPLER_NOTES.get(space.study.sampler.name)
    if note:
        print(f"sampler {space.study.sampler.name}: {note}", file=sys.stderr)
    if args.workers == 0:  # workers elsewhere (a cluster job) run it
        print(f"study {name!r} is ready: start workers with HPO_STORAGE set and `hpo worker --study {name}`", file=sys.stderr)
        return ExitCode.OK
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
    _show_trials(args, study, best, "Pareto front")
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

    if not _probe_first(study, space_of(study), f"hpo worker: study {args.study!r}"):
        return ExitCode.NO_KNOBS_RUN_HERE
    try:
        run_worker(study, args.storage, timeout=args.timeout, isolate=not args.in_process)
    except TrialsCannotStart as exc:  # this worker could not run trials; the study goes on without it
        print(f"hpo worker: error: {exc}", file=sys.stderr)
        return ExitCode.WORKER_FAILED
    except (sqlalchemy.exc.SQLAlchemyError, optuna.exceptions.StorageInternalError) as exc:  # storage lost
        print(f"hpo worker: error: the storage failed ({_first_line(exc)}); its trial is retried once stale", file=sys.stderr)
        return ExitCode.STORAGE_UNREACHABLE
    return ExitCode.OK


def _first_line(exc: BaseException) -> str:
    """A storage error's first line (SQLAlchemy wraps the driver's error as `orig`), password masked."""
    return mask_password((str(getattr(exc, "orig", None) or exc).splitlines() or [type(exc).__name__])[0])


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


def cmd_best(args) -> int:
    from hpo.app.best_and_export import open_study
    from hpo.app.pick import fastest_within
    from hpo.reporting.ranking import best_trials

    study = open_study(args.study, _storage(args, args.study))
    trials = [fastest_within(study, args.within)] if args.within is not None else best_trials(study)
    what = "Pareto front" if args.within is None else f"fastest within {args.within}% of the best {_metric_names(study)[0]}"
    _show_trials(args, study, trials, what)
    return ExitCode.OK


def _metric_names(study) -> list[str]:
    return study.metric_names or [f"objective {i}" for i in range(len(study.directions))]


def _show_trials(args, study, trials: list, what: str) -> None:
    """`hpo run`'s and `hpo best`'s result: a list of trials (`trial_json`), or a table of them."""
    from hpo.app.pick import front_table

    names = _metric_names(study)
    title = f"{what} of study {study.study_name!r} ({len(trials)} trial{'s' if len(trials) != 1 else ''}):"
    _show(args, [trial_json(t, study.metric_names) for t in trials], f"{title}\n{front_table(trials, names)}")


def cmd_export(args) -> int:
    from hpo.app.best_and_export import export_config, export_top, find_trial, open_study
    from hpo.app.pick import fastest_within

    if args.as_format == "yaml" and args.output is None:
        raise UserInputError("-o FILE.yaml (or a folder with --top) is required")
    # Checked before the study is opened: nothing is read or written for a bad -o.
    output = _output_file(args.output) if args.as_format == "yaml" and args.top is None else None
    if args.as_format != "yaml" and args.output is not None and not Path(args.output).parent.is_dir():
        raise UserInputError(f"-o {args.output}: folder {Path(args.output).parent} does not exist; create it first")
    if args.format == "json" and args.output is None:
        raise UserInputError(f"--format json lists the files written: give -o; without it --as {args.as_format} prints its code")
    study = open_study(args.study, _storage(args, args.study))
    if args.as_format != "yaml":
        return _export_as(args, study)
    if args.top is not None:
        written = [(trial.number, path) for trial, path in export_top(study, args.top, Path(args.output))]
    else:
        trial = fastest_within(study, args.within) if args.within is not None else find_trial(study, args.trial)
        export_config(trial, output)
        written = [(trial.number, args.output)]
    lines = [f"trial {number} config written to {path}" for number, path in written]
    _show(args, [written_json(number, "yaml", path) for number, path in written], "\n".join(lines))
    return ExitCode.OK


def _export_as(args, study) -> int:
    from hpo.app.best_and_export import find_trial
    from hpo.app.export_as import export_as
    from hpo.app.pick import fastest_within

    if args.top is not None:
        raise UserInputError(f"--top exports hpo configs; --as {args.as_format} writes one trial (--trial N or --within PCT)")
    trial = fastest_within(study, args.within) if args.within is not None else find_trial(study, args.trial)
    result = export_as(trial, args.as_format, Path(args.output) if args.output else None)
    if isinstance(result, str):  # the code itself is the result
        print(result, end="")
        return ExitCode.OK
    lines = [f"trial {trial.number} as {args.as_format}: {path}" for path in result]
    _show(args, [written_json(trial.number, args.as_format, path) for path in result], "\n".join(lines))
    return ExitCode.OK


def cmd_probe(args) -> int:
    import dataclasses

    from tqdm import tqdm

    from hpo.app.sweep import combinations, sweep, table
    from hpo.config.space import load_space
    from hpo.verdicts import Verdict
    from hpo.verify.cache import MemoryVerdicts, StudyVerdicts

    space = load_space(args.space)
    store = MemoryVerdicts()
    if args.study or args.storage:
        from hpo.study.create import create_or_resume

        name = args.study or space.study.name
        store = StudyVerdicts(create_or_resume(space, _storage(args, name), name))
    with tqdm(total=len(combinations(space)), desc="probing knob combinations", unit="combo", file=sys.stderr) as bar:
        rows = sweep(space, store, on_row=lambda row: bar.update(1))
    _show(args, [knob_row_json(dataclasses.asdict(r)) for r in rows], table(rows))
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
        return enqueue_from_study(args, _storage(args, args.from_study), _storage(args, args.study))
    if args.config is None or args.study is None:
        raise UserInputError("hpo enqueue takes --study NAME CONFIG.yaml, or --study B --from-study A [--top K]")
    from hpo.study.enqueue import enqueue_file

    params = enqueue_file(args.config, args.study, _storage(args, args.study))
    print(
        f"{args.config} enqueued in study {args.study!r} as a waiting trial with params {params}; its next worker runs it first"
    )
    return ExitCode.OK


def cmd_train(args) -> int:
    from hpo.app.retrain import retrain

    config, outcome = retrain(Path(args.config))
    lines = [f"verdict: {outcome.verdict}"]
    lines += [f"{name}: {value:.6g}" for name, value in zip(config.objectives, outcome.values or ())]
    _show(args, outcome_json(config, outcome), "\n".join(lines))
    return ExitCode.OK if outcome.ok else ExitCode.NO_TRIAL_TRAINED


def cmd_doctor(args) -> int:
    from hpo.app.doctor import capability_report, device_from_flag, format_report, verdict_rows

    report = capability_report(device_from_flag(args.device))
    if args.study:
        from hpo.app.best_and_export import open_study

        report["verdicts"] = verdict_rows(open_study(args.study, _storage(args, args.study)))
    print(dumps(report, indent=2) if args.format == "json" else format_report(report))
    return ExitCode.OK


def cmd_dashboard(args) -> int:
    from hpo.app.dashboard import serve_dashboard

    serve_dashboard(args.storage or default_storage(args.study or "hpo-study"), args.study, args.host, args.port)
    return ExitCode.OK


def cmd_report(args) -> int:
    from hpo.app.best_and_export import open_study
    from hpo.app.report import write_report

    output = _output_file(args.output)
    write_report(open_study(args.study, _storage(args, args.study)), output)
    _show(args, [written_json(None, "report", args.output)], f"report written to {args.output}")
    return ExitCode.OK


def cmd_gpu_check(args) -> int:
    from hpo.app.gpu_check import MatrixCheck, check_here, matrix

    how = MatrixCheck(batch_size=args.batch_size, steps=args.steps, compile_backend=args.compile_backend, device=args.device)
    combos = matrix(args.precision, args.attention, args.optimizer, args.checkpointing, args.compile)
    print(check_here(Path(args.out_dir), args.workloads, combos, how, args.timeout))
    return 0


COMMANDS = {
    "validate": cmd_validate,
    "run": cmd_run,
    "worker": cmd_worker,
    "best": cmd_best,
    "export": cmd_export,
    "probe": cmd_probe,
    "enqueue": cmd_enqueue,
    "train": cmd_train,
    "doctor": cmd_doctor,
    "dashboard": cmd_dashboard,
    "report": cmd_report,
    "gpu-check": cmd_gpu_check,
}


def build_parser():
    from hpo.app.parser import build_parser as build

    return build(COMMANDS)


def _quiet_libraries() -> None:
    os.environ.setdefault("KINETO_LOG_LEVEL", "5")  # the profiler's start/stop lines are noise here
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)  # hpo prints its own line per trial
    warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)  # --help and --version exit here, before any import
    _quiet_libraries()
    set_verbosity(logging.DEBUG if args.verbose else logging.ERROR if args.quiet else logging.INFO)
    try:
        return int(args.func(args))
    except UserInputError as exc:
        one_line = " ".join(str(exc).split())  # the contract is one line, whatever the message held
        print(f"hpo {args.command}: error: {mask_password(one_line)}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print("hpo: interrupted", file=sys.stderr)
        return ExitCode.INTERRUPTED
    except Exception as exc:  # noqa: BLE001 - one code per meaning: not Python's 1, which means "no trial trained"
        return _unexpected(args.command, exc)


def _unexpected(command: str, exc: Exception) -> int:
    """A storage that failed mid-command exits 3 in one line; anything else is a bug in hpo: its
    traceback, then exit 70."""
    if _is_storage_error(exc):
        print(f"hpo {command}: error: the storage failed ({_first_line(exc)})", file=sys.stderr)
        return ExitCode.STORAGE_UNREACHABLE
    traceback.print_exc()
    print(
        f"hpo {command}: internal error (exit {int(ExitCode.INTERNAL_ERROR)}): please report the traceback above", file=sys.stderr
    )
    return ExitCode.INTERNAL_ERROR


def _is_storage_error(exc: Exception) -> bool:
    # Only a command that opened a storage can raise one, so its modules are loaded then: no import here.
    sa, optuna_exc = sys.modules.get("sqlalchemy.exc"), sys.modules.get("optuna.exceptions")
    kinds = ([sa.SQLAlchemyError] if sa else []) + ([optuna_exc.StorageInternalError] if optuna_exc else [])
    return isinstance(exc, tuple(kinds))


if __name__ == "__main__":
    sys.exit(main())
