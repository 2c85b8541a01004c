"""The `hpo` command line's arguments: every subcommand, its flags and their help.

One function per subcommand adds its arguments; `_SUBCOMMANDS` lists them in the order `hpo --help`
shows them."""

from __future__ import annotations

import argparse
from collections.abc import Callable

from hpo import __version__
from hpo.app._arg_groups import TOP_DEFAULT, format_args, space_arg, storage_arg, storage_args, top_arg
from hpo.app._gpu_check_args import gpu_check_args

__all__ = ["TOP_DEFAULT", "build_parser"]

_IN_PROCESS_HELP = "run trials in the worker process, not a child per trial"
_WITHIN_HELP = "the fastest trial whose first objective is within PCT percent of the best"
_FIXED_CONFIG_HELP = "a config with every value fixed, such as one written by `hpo export`"


def build_parser(commands: dict[str, Callable]) -> argparse.ArgumentParser:
    """The `hpo` argument parser; `commands` maps each subcommand to the function that runs it."""
    parser = argparse.ArgumentParser(prog="hpo", description="Systems-aware hyperparameter search for PyTorch.")
    parser.add_argument("--version", action="version", version=f"hpo {__version__}")
    loudness = parser.add_mutually_exclusive_group()
    loudness.add_argument("-v", "--verbose", action="store_true", help="also log debug detail")
    loudness.add_argument("-q", "--quiet", action="store_true", help="log errors only (results and progress still show)")
    sub = parser.add_subparsers(dest="command", required=True)
    for name, help_text, add_arguments in _SUBCOMMANDS:
        command = sub.add_parser(name, help=help_text, description=help_text)
        command.set_defaults(func=commands[name])
        add_arguments(command)
    return parser


def _validate_args(p: argparse.ArgumentParser) -> None:
    space_arg(p)
    format_args(p, '{"file", "study", "workload", "params", "searched_knobs"}; a bad file exits 2 either way')


def _run_args(p: argparse.ArgumentParser) -> None:
    space_arg(p)
    storage_args(p, study_required=False)
    p.add_argument("--n-trials", type=int, help="trial budget of a new study (default: study.n_trials)")
    p.add_argument("--timeout", type=float, help="stop starting trials after this many seconds")
    p.add_argument(
        "--workers",
        type=int,
        help="local worker processes (default: one per visible GPU, or per N GPUs for trials of "
        "systems.parallel.processes N, 1 on CPU; "
        "0: only create or resume the study, for workers started elsewhere)",
    )
    p.add_argument("--in-process", action="store_true", help=_IN_PROCESS_HELP)
    format_args(p, "the best trials when the run ends, as `hpo best --format json` prints them")


def _worker_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--study", required=True, help="the study to join (created by `hpo run`)")
    storage_arg(p, "SQLAlchemy URL of the study (default: $HPO_STORAGE, which keeps a password out of ps)")
    p.add_argument("--timeout", type=float, help="stop starting trials after this many seconds (default: study.timeout)")
    p.add_argument("--in-process", action="store_true", help=_IN_PROCESS_HELP)


def _best_args(p: argparse.ArgumentParser) -> None:
    storage_args(p)
    format_args(p, "a list of trials: Optuna's study.best_trials among the trials that trained")
    p.add_argument("--within", type=float, metavar="PCT", help=_WITHIN_HELP)


def _export_args(p: argparse.ArgumentParser) -> None:
    storage_args(p)
    which = p.add_mutually_exclusive_group()
    which.add_argument("--trial", type=int, help="trial number (default: best)")
    which.add_argument("--within", type=float, metavar="PCT", help=_WITHIN_HELP)
    top_arg(which, "the K best trials that trained (the Pareto front first), as DIR/trial-N.yaml")
    p.add_argument(
        "--as",
        dest="as_format",
        choices=["yaml", "hf", "lightning", "python"],
        default="yaml",
        help="yaml: an hpo config (default); hf: training_args.json + model_kwargs.json for the Hugging Face "
        "Trainer; lightning: Trainer and optimizer kwargs; python: a plain-loop snippet (printed without -o). "
        "Each reproduces the knobs the trial was observed to run",
    )
    p.add_argument("-o", "--output", help="a file, or a folder with --top, --as hf or --as lightning")
    format_args(p, 'a list of the files written, [{"number", "what", "path"}]')


def _probe_args(p: argparse.ArgumentParser) -> None:
    space_arg(p)
    p.add_argument(
        "--fresh",
        action="store_true",
        help="probe every combination anew, ignoring the facts this machine keeps from earlier probes of this model "
        "(`hpo doctor` lists them); what is measured replaces them",
    )
    storage_args(p, study_required=False)
    format_args(p, "a list of knob rows, ranked by samples/s")


def _enqueue_args(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--study",
        "--to-study",
        dest="study",
        help="the study to enqueue into; with --from-study it is created from --space, or from --from-study's "
        "space (--to-study: its older spelling, still accepted)",
    )
    storage_arg(p, "SQLAlchemy URL of --study (default: $HPO_STORAGE if set, else sqlite:///studies/<study>.db)")
    p.add_argument("config", nargs="?", help=_FIXED_CONFIG_HELP)
    p.add_argument("--from-study", help="enqueue this study's best configurations instead of a CONFIG")
    p.add_argument("--space", help="the search-space file of --study, when --from-study creates it")
    top_arg(p, "how many of --from-study's best trials that trained (the Pareto front first)", default=TOP_DEFAULT)
    p.add_argument("--from-storage", help="storage URL of --from-study when it differs from --storage")
    format_args(p, 'a list of {"study", "source", "params", "skipped"}: one per trial enqueued or skipped')


def _train_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("config", help=_FIXED_CONFIG_HELP)
    format_args(p, "one trial, in the shape `hpo best` prints (number and state null: no study)")


def _doctor_args(p: argparse.ArgumentParser) -> None:
    format_args(p, "the report as one object; with --study its verdicts are knob rows")
    p.add_argument("--device", default="auto", help="auto (the worker's GPU if any), cpu, cuda:N or mps")
    storage_args(p, study_required=False)


def _dashboard_args(p: argparse.ArgumentParser) -> None:
    storage_args(p, study_required=False)
    p.add_argument("--host", default="127.0.0.1", help="address to serve on (default 127.0.0.1: this machine only)")
    p.add_argument("--port", type=int, default=8080, help="port to serve on (default 8080)")


def _report_args(p: argparse.ArgumentParser) -> None:
    storage_args(p)
    p.add_argument("-o", "--output", required=True, help="the HTML file to write (its folder must exist)")
    format_args(p, 'the file written, [{"number": null, "what": "report", "path"}]')


# Each subcommand: its name, its help (also its description) and the function that adds its arguments.
_SUBCOMMANDS: tuple[tuple[str, str, Callable[[argparse.ArgumentParser], None]], ...] = (
    ("validate", "check a search-space file (an exported config is one)", _validate_args),
    ("run", "create or resume a study and run its trials", _run_args),
    ("worker", "join an existing study and run trials until its budget is spent", _worker_args),
    ("best", "show the best trials as a table (the Pareto front for several objectives)", _best_args),
    ("export", "write a runnable config of one trial, or of the top K", _export_args),
    ("probe", "probe every knob combination of a space here, ranked by throughput (no training)", _probe_args),
    ("enqueue", "warm start: enqueue an exported config, or another study's K best, as next trials", _enqueue_args),
    ("train", "retrain an exported config without Optuna", _train_args),
    ("doctor", "hardware, software and which knobs are usable here", _doctor_args),
    ("dashboard", "start optuna-dashboard on 127.0.0.1", _dashboard_args),
    ("report", "write a static HTML report with plots", _report_args),
    ("gpu-check", "verify every knob combination of each workload here, each as a short trial", gpu_check_args),
)
