"""The `hpo` command: parse, call one library function, map errors to exit codes."""

from __future__ import annotations

import argparse
import json
import os
import sys
import warnings
from pathlib import Path

from hpo import __version__
from hpo.errors import UserInputError
from hpo.storage.urls import default_storage, mask_password


def _storage(args, study_name: str) -> str:
    return args.storage or default_storage(study_name)


def cmd_validate(args) -> int:
    from hpo.space.loader import load_space

    space = load_space(args.space)
    print(f"{args.space}: ok (study {space.study.name!r}, workload {space.spec.workload.name!r}, "
          f"{len(space.params)} params, searched knobs: {[k for k, v in space.systems.items() if len(v) > 1]})")
    return 0


def cmd_run(args) -> int:
    from hpo.execution.study import create_or_resume
    from hpo.execution.workers import run_workers
    from hpo.reuse import best_trials, trial_summary
    from hpo.space.loader import load_space

    space = load_space(args.space)
    if args.workers is not None and args.workers < 0:
        raise UserInputError(f"--workers must be >= 0 (0: create or resume the study only), got {args.workers}")
    name = args.study or space.study.name
    url = _storage(args, name)
    study = create_or_resume(space, url, name, n_trials=args.n_trials)
    print(f"study {name!r} in {mask_password(url)}", file=sys.stderr)
    if args.workers == 0:  # workers elsewhere (a cluster job) run it
        print(f"study {name!r} is ready: start workers with HPO_STORAGE set and `hpo worker --study {name}`", file=sys.stderr)
        return 0
    timeout = args.timeout if args.timeout is not None else space.study.timeout
    failed = run_workers(study, url, workers=args.workers, timeout=timeout, isolate=not args.in_process)
    if failed:
        return 1
    try:
        best = best_trials(study)
    except UserInputError as exc:
        print(f"no best trial: {exc}", file=sys.stderr)
        return 1
    for trial in best:
        print(json.dumps({k: v for k, v in trial_summary(trial).items() if k != "user_attrs"}))
    return 0


def cmd_worker(args) -> int:
    from hpo.execution.workers import run_worker
    from hpo.reuse import open_study

    if not args.storage:
        raise UserInputError("--storage is required (or set HPO_STORAGE): the study's shared database URL")
    study = open_study(args.study, args.storage)
    run_worker(study, args.storage, timeout=args.timeout, isolate=not args.in_process)
    return 0


def cmd_best(args) -> int:
    from hpo.reuse import best_trials, open_study, trial_summary

    trials = best_trials(open_study(args.study, _storage(args, args.study)))
    if args.json:
        print(json.dumps([trial_summary(t) for t in trials], default=str))
        return 0
    for t in trials:
        attrs = t.user_attrs
        print(f"trial {t.number}: values {t.values}  params {t.params}")
        print(f"  knobs requested {attrs.get('knobs_requested')}")
        print(f"  knobs observed  {attrs.get('knobs_observed')}")
        print(f"  {attrs.get('train_samples_per_s', float('nan')):.1f} samples/s, step {attrs.get('step_time_ms', float('nan')):.1f} ms, "
              f"peak {attrs.get('peak_mem_mb', float('nan')):.0f} MB on {attrs.get('device')}")
    return 0


def cmd_export(args) -> int:
    from hpo.reuse import export_config, find_trial, open_study

    trial = find_trial(open_study(args.study, _storage(args, args.study)), args.trial)
    export_config(trial, Path(args.output))
    print(f"trial {trial.number} config written to {args.output}")
    return 0


def cmd_train(args) -> int:
    from hpo.reuse import load_trial_config, retrain

    config = load_trial_config(Path(args.config))
    outcome = retrain(config)
    if args.json:
        print(json.dumps({"objectives": list(config.objectives), "values": outcome.values,
                          "verdict": outcome.verdict, "user_attrs": outcome.attrs}, default=str))
    else:
        print(f"verdict: {outcome.verdict}")
        if outcome.values is not None:
            for name, value in zip(config.objectives, outcome.values):
                print(f"{name}: {value:.6g}")
    return 0 if outcome.ok else 1


def cmd_doctor(args) -> int:
    from hpo.hardware.doctor import capability_report, format_report, verdict_rows
    from hpo.hardware.runtime import resolve_device

    report = capability_report(resolve_device(args.device))
    if args.study:
        from hpo.reuse import open_study

        report["verdicts"] = verdict_rows(open_study(args.study, _storage(args, args.study)))
    print(json.dumps(report, indent=2, default=str) if args.json else format_report(report))
    return 0


def cmd_dashboard(args) -> int:
    from hpo import _imports
    from hpo.storage.open import open_storage

    url = args.storage or default_storage(args.study or "hpo-study")
    dashboard = _imports.optuna_dashboard()
    print(f"optuna-dashboard for {mask_password(url)} on http://{args.host}:{args.port}", file=sys.stderr)
    dashboard.run_server(open_storage(url), host=args.host, port=args.port)
    return 0


def cmd_report(args) -> int:
    from hpo.report import write_report
    from hpo.reuse import open_study

    write_report(open_study(args.study, _storage(args, args.study)), Path(args.output))
    print(f"report written to {args.output}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="hpo", description="Systems-aware hyperparameter search for PyTorch.")
    parser.add_argument("--version", action="version", version=f"hpo {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)

    def add(name: str, func, help_text: str) -> argparse.ArgumentParser:
        p = sub.add_parser(name, help=help_text, description=help_text)
        p.set_defaults(func=func)
        return p

    def storage_args(p, study_required: bool = True) -> None:
        p.add_argument("--study", required=study_required, help="study name")
        p.add_argument("--storage", help="SQLAlchemy URL (default: sqlite:///studies/<study>.db)")

    p = add("validate", cmd_validate, "check a search-space file")
    p.add_argument("space")
    p = add("run", cmd_run, "create or resume a study and run its trials")
    p.add_argument("space")
    storage_args(p, study_required=False)
    p.add_argument("--n-trials", type=int, help="trial budget of a new study (default: study.n_trials)")
    p.add_argument("--timeout", type=float, help="stop starting trials after this many seconds")
    p.add_argument("--workers", type=int, help="local worker processes (default: one per visible GPU, 1 on CPU; "
                                               "0: only create or resume the study, for workers started elsewhere)")
    p.add_argument("--in-process", action="store_true", help="run trials in the worker process, not a child per trial")
    p = add("worker", cmd_worker, "join an existing study and run trials until its budget is spent")
    p.add_argument("--study", required=True)
    p.add_argument("--storage", default=os.environ.get("HPO_STORAGE"),
                   help="SQLAlchemy URL of the study (default: $HPO_STORAGE, which keeps a password out of ps)")
    p.add_argument("--timeout", type=float)
    p.add_argument("--in-process", action="store_true")
    p = add("best", cmd_best, "show the best trial (the Pareto front for several objectives)")
    storage_args(p)
    p.add_argument("--json", action="store_true")
    p = add("export", cmd_export, "write a runnable config of one trial")
    storage_args(p)
    p.add_argument("--trial", type=int, help="trial number (default: best)")
    p.add_argument("-o", "--output", required=True)
    p = add("train", cmd_train, "retrain an exported config without Optuna")
    p.add_argument("config")
    p.add_argument("--json", action="store_true")
    p = add("doctor", cmd_doctor, "hardware, software and which knobs are usable here")
    p.add_argument("--json", action="store_true")
    p.add_argument("--device", default="auto")
    storage_args(p, study_required=False)
    p = add("dashboard", cmd_dashboard, "start optuna-dashboard on 127.0.0.1")
    storage_args(p, study_required=False)
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8080)
    p = add("report", cmd_report, "write a static HTML report with plots")
    storage_args(p)
    p.add_argument("-o", "--output", required=True)
    return parser


def _quiet_libraries() -> None:
    os.environ.setdefault("KINETO_LOG_LEVEL", "5")  # the profiler's start/stop lines are noise here
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)  # hpo prints its own line per trial
    warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)


def main(argv: list[str] | None = None) -> int:
    _quiet_libraries()
    args = build_parser().parse_args(argv)
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
