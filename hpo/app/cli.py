"""The `hpo` command: parse, call one library function, map errors to exit codes."""

from __future__ import annotations

import json
import logging
import os
import sys
import warnings
from pathlib import Path

from hpo.errors import UserInputError
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


def cmd_validate(args) -> int:
    from hpo.config.space import load_space

    space = load_space(args.space)
    print(
        f"{args.space}: ok (study {space.study.name!r}, workload {space.spec.workload.name!r}, "
        f"{len(space.params)} params, searched knobs: {[k for k, v in space.systems.items() if len(v) > 1]})"
    )
    return 0


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
    from hpo.app.best_and_export import trial_summary
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
        return 0
    if not _probe_first(study, space, f"study {name!r}"):
        return 1
    timeout = args.timeout if args.timeout is not None else space.study.timeout
    failed = run_workers(study, url, workers=args.workers, timeout=timeout, isolate=not args.in_process)
    if failed:
        return 1
    try:
        best = best_trials(study)
    except UserInputError as exc:  # every trial failed, was rejected or was pruned: see the exit codes in README
        print(f"no best trial: {exc}", file=sys.stderr)
        return 1
    for trial in best:
        print(json.dumps({k: v for k, v in trial_summary(trial).items() if k != "user_attrs"}))
    return 0


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
        return 1
    try:
        run_worker(study, args.storage, timeout=args.timeout, isolate=not args.in_process)
    except TrialsCannotStart as exc:  # exit 1: this worker could not run trials; the study goes on without it
        print(f"hpo worker: error: {exc}", file=sys.stderr)
        return 1
    except (sqlalchemy.exc.SQLAlchemyError, optuna.exceptions.StorageInternalError) as exc:  # exit 3: storage lost
        first = (str(getattr(exc, "orig", None) or exc).splitlines() or [type(exc).__name__])[0]
        print(f"hpo worker: error: the storage failed ({mask_password(first)}); its trial is retried once stale", file=sys.stderr)
        return 3
    return 0


def _probe_first(study, space, who: str) -> bool:
    """`study.strategy: probe_first`: the opening sweep (run here, or by another worker) decided the
    knobs; False (exit 1) when it verified none, after one line per rejected value."""
    from hpo.app.probe_first import NothingVerified, decide

    try:
        decide(study, space)
    except NothingVerified as exc:
        print(f"{who}: no knob combination passed the sweep (study.strategy: probe_first); rejected:", file=sys.stderr)
        print(str(exc), file=sys.stderr)
        return False
    return True


def cmd_best(args) -> int:
    from hpo.app.best_and_export import open_study, trial_summary
    from hpo.app.pick import fastest_within, front_table
    from hpo.reporting.ranking import best_trials

    study = open_study(args.study, _storage(args, args.study))
    trials = [fastest_within(study, args.within)] if args.within is not None else best_trials(study)
    if args.json:
        print(json.dumps([trial_summary(t) for t in trials], default=str))
        return 0
    names = study.metric_names or [f"objective {i}" for i in range(len(study.directions))]
    what = f"fastest within {args.within}% of the best {names[0]}" if args.within is not None else "Pareto front"
    print(f"{what} of study {study.study_name!r} ({len(trials)} trial{'s' if len(trials) != 1 else ''}):")
    print(front_table(trials, names))
    return 0


def cmd_export(args) -> int:
    from hpo.app.best_and_export import export_config, export_top, find_trial, open_study
    from hpo.app.pick import fastest_within

    if args.as_format == "yaml" and args.output is None:
        raise UserInputError("-o FILE.yaml (or a folder with --top) is required")
    # Checked before the study is opened: nothing is read or written for a bad -o.
    output = _output_file(args.output) if args.as_format == "yaml" and args.top is None else None
    if args.as_format != "yaml" and args.output is not None and not Path(args.output).parent.is_dir():
        raise UserInputError(f"-o {args.output}: folder {Path(args.output).parent} does not exist; create it first")
    study = open_study(args.study, _storage(args, args.study))
    if args.as_format != "yaml":
        return _export_as(args, study)
    if args.top is not None:
        for trial, path in export_top(study, args.top, Path(args.output)):
            print(f"trial {trial.number} config written to {path}")
        return 0
    trial = fastest_within(study, args.within) if args.within is not None else find_trial(study, args.trial)
    export_config(trial, output)
    print(f"trial {trial.number} config written to {args.output}")
    return 0


def _export_as(args, study) -> int:
    from hpo.app.best_and_export import find_trial
    from hpo.app.export_as import export_as
    from hpo.app.pick import fastest_within

    if args.top is not None:
        raise UserInputError(f"--top exports hpo configs; --as {args.as_format} writes one trial (--trial N or --within PCT)")
    trial = fastest_within(study, args.within) if args.within is not None else find_trial(study, args.trial)
    result = export_as(trial, args.as_format, Path(args.output) if args.output else None)
    if isinstance(result, str):
        print(result, end="")
        return 0
    for path in result:
        print(f"trial {trial.number} as {args.as_format}: {path}")
    return 0


def cmd_probe(args) -> int:
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
    print(json.dumps([r.as_json() for r in rows]) if args.json else table(rows))
    if not any(Verdict.parse(r.verdict).ok for r in rows):  # exit codes: README; 1 as when no trial trained
        print(f"no knob combination of {args.space} can run here: see the verdicts above", file=sys.stderr)
        return 1
    return 0


def cmd_enqueue(args) -> int:
    if args.from_study is not None:
        from hpo.app.warm import enqueue_from_study

        if args.to_study is None:
            raise UserInputError("--from-study needs --to-study NAME: the study to warm-start")

        return enqueue_from_study(args, _storage(args, args.from_study), _storage(args, args.to_study))
    if args.config is None or args.study is None:
        raise UserInputError("hpo enqueue takes --study NAME CONFIG.yaml, or --from-study A --to-study B [--top K]")
    from hpo.study.enqueue import enqueue_file

    params = enqueue_file(args.config, args.study, _storage(args, args.study))
    print(
        f"{args.config} enqueued in study {args.study!r} as a waiting trial with params {params}; its next worker runs it first"
    )
    return 0


def cmd_train(args) -> int:
    from hpo.app.retrain import retrain

    config, outcome = retrain(Path(args.config))
    if args.json:
        print(
            json.dumps(
                {
                    "objectives": list(config.objectives),
                    "values": outcome.values,
                    "verdict": str(outcome.verdict),
                    "user_attrs": outcome.attrs,
                },
                default=str,
            )
        )
    else:
        print(f"verdict: {outcome.verdict}")
        if outcome.values is not None:
            for name, value in zip(config.objectives, outcome.values):
                print(f"{name}: {value:.6g}")
    return 0 if outcome.ok else 1


def cmd_doctor(args) -> int:
    from hpo.app.doctor import capability_report, device_from_flag, format_report, verdict_rows

    report = capability_report(device_from_flag(args.device))
    if args.study:
        from hpo.app.best_and_export import open_study

        report["verdicts"] = verdict_rows(open_study(args.study, _storage(args, args.study)))
    print(json.dumps(report, indent=2, default=str) if args.json else format_report(report))
    return 0


def cmd_dashboard(args) -> int:
    from hpo.app.dashboard import serve_dashboard

    serve_dashboard(args.storage or default_storage(args.study or "hpo-study"), args.study, args.host, args.port)
    return 0


def cmd_report(args) -> int:
    from hpo.app.best_and_export import open_study
    from hpo.app.report import write_report

    output = _output_file(args.output)
    write_report(open_study(args.study, _storage(args, args.study)), output)
    print(f"report written to {args.output}")
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
        return args.func(args)
    except UserInputError as exc:
        one_line = " ".join(str(exc).split())  # the contract is one line, whatever the message held
        print(f"hpo {args.command}: error: {mask_password(one_line)}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print("hpo: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
