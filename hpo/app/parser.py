"""The `hpo` command line's arguments: every subcommand, its flags and their help."""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable

from hpo import __version__

__all__ = ["TOP_DEFAULT", "build_parser"]

TOP_DEFAULT = 3  # `--top` alone, in `hpo export` and `hpo enqueue` alike


def build_parser(commands: dict[str, Callable]) -> argparse.ArgumentParser:
    """The `hpo` argument parser; `commands` maps each subcommand to the function that runs it."""
    parser = argparse.ArgumentParser(prog="hpo", description="Systems-aware hyperparameter search for PyTorch.")
    parser.add_argument("--version", action="version", version=f"hpo {__version__}")
    loudness = parser.add_mutually_exclusive_group()
    loudness.add_argument("-v", "--verbose", action="store_true", help="also log debug detail")
    loudness.add_argument("-q", "--quiet", action="store_true", help="log errors only (results and progress still show)")
    sub = parser.add_subparsers(dest="command", required=True)

    def add(name: str, func, help_text: str) -> argparse.ArgumentParser:
        p = sub.add_parser(name, help=help_text, description=help_text)
        p.set_defaults(func=func)
        return p

    def storage_args(p, study_required: bool = True, study_help: str = "study name") -> None:
        p.add_argument("--study", required=study_required, help=study_help)
        storage_arg(p, "SQLAlchemy URL (default: $HPO_STORAGE if set, else sqlite:///studies/<study>.db)")

    def storage_arg(p, help_text: str) -> None:
        p.add_argument("--storage", default=os.environ.get("HPO_STORAGE"), help=help_text)

    def format_args(p, json_shape: str) -> None:
        """`--format table|json`, and `--json`: its older spelling, kept as an alias."""
        p.add_argument(
            "--format",
            choices=["table", "json"],
            default="table",
            help=f"table: for people (default); json: {json_shape} (shapes: docs/cli.md)",
        )
        p.add_argument("--json", dest="format", action="store_const", const="json", help="alias of --format json")

    def top_arg(p, help_text: str, **kwargs) -> None:
        kwargs.setdefault("nargs", "?")
        p.add_argument(
            "--top",
            type=int,
            const=TOP_DEFAULT,
            metavar="K",
            help=f"{help_text}; K is {TOP_DEFAULT} if omitted, as in `hpo export` and `hpo enqueue`",
            **kwargs,
        )

    p = add("validate", commands["validate"], "check a search-space file (an exported config is one)")
    p.add_argument("space", help="the search-space YAML file (an exported config is one)")
    format_args(p, '{"file", "study", "workload", "params", "searched_knobs"}; a bad file exits 2 either way')
    p = add("run", commands["run"], "create or resume a study and run its trials")
    p.add_argument("space", help="the search-space YAML file (an exported config is one)")
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
    p.add_argument("--in-process", action="store_true", help="run trials in the worker process, not a child per trial")
    format_args(p, "the best trials when the run ends, as `hpo best --format json` prints them")
    p = add("worker", commands["worker"], "join an existing study and run trials until its budget is spent")
    p.add_argument("--study", required=True, help="the study to join (created by `hpo run`)")
    storage_arg(p, "SQLAlchemy URL of the study (default: $HPO_STORAGE, which keeps a password out of ps)")
    p.add_argument("--timeout", type=float, help="stop starting trials after this many seconds (default: study.timeout)")
    p.add_argument("--in-process", action="store_true", help="run trials in the worker process, not a child per trial")
    within_help = "the fastest trial whose first objective is within PCT percent of the best"
    p = add("best", commands["best"], "show the best trials as a table (the Pareto front for several objectives)")
    storage_args(p)
    format_args(p, "a list of trials: Optuna's study.best_trials among the trials that trained")
    p.add_argument("--within", type=float, metavar="PCT", help=within_help)
    p = add("export", commands["export"], "write a runnable config of one trial, or of the top K")
    storage_args(p)
    which = p.add_mutually_exclusive_group()
    which.add_argument("--trial", type=int, help="trial number (default: best)")
    which.add_argument("--within", type=float, metavar="PCT", help=within_help)
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
    p = add("probe", commands["probe"], "probe every knob combination of a space here, ranked by throughput (no training)")
    p.add_argument("space", help="the search-space YAML file (an exported config is one)")
    p.add_argument(
        "--fresh",
        action="store_true",
        help="probe every combination anew, ignoring the facts this machine keeps from earlier probes of this model "
        "(`hpo doctor` lists them); what is measured replaces them",
    )
    storage_args(p, study_required=False)
    format_args(p, "a list of knob rows, ranked by samples/s")
    p = add("enqueue", commands["enqueue"], "warm start: enqueue an exported config, or another study's K best, as next trials")
    p.add_argument(
        "--study",
        "--to-study",
        dest="study",
        help="the study to enqueue into; with --from-study it is created from --space, or from --from-study's "
        "space (--to-study: its older spelling, still accepted)",
    )
    storage_arg(p, "SQLAlchemy URL of --study (default: $HPO_STORAGE if set, else sqlite:///studies/<study>.db)")
    p.add_argument("config", nargs="?", help="a config with every value fixed, such as one written by `hpo export`")
    p.add_argument("--from-study", help="enqueue this study's best configurations instead of a CONFIG")
    p.add_argument("--space", help="the search-space file of --study, when --from-study creates it")
    top_arg(p, "how many of --from-study's best trials that trained (the Pareto front first)", default=TOP_DEFAULT)
    p.add_argument("--from-storage", help="storage URL of --from-study when it differs from --storage")
    format_args(p, 'a list of {"study", "source", "params", "skipped"}: one per trial enqueued or skipped')
    p = add("train", commands["train"], "retrain an exported config without Optuna")
    p.add_argument("config", help="a config with every value fixed, such as one written by `hpo export`")
    format_args(p, "one trial, in the shape `hpo best` prints (number and state null: no study)")
    p = add("doctor", commands["doctor"], "hardware, software and which knobs are usable here")
    format_args(p, "the report as one object; with --study its verdicts are knob rows")
    p.add_argument("--device", default="auto", help="auto (the worker's GPU if any), cpu, cuda:N or mps")
    storage_args(p, study_required=False)
    p = add("dashboard", commands["dashboard"], "start optuna-dashboard on 127.0.0.1")
    storage_args(p, study_required=False)
    p.add_argument("--host", default="127.0.0.1", help="address to serve on (default 127.0.0.1: this machine only)")
    p.add_argument("--port", type=int, default=8080, help="port to serve on (default 8080)")
    p = add("report", commands["report"], "write a static HTML report with plots")
    storage_args(p)
    p.add_argument("-o", "--output", required=True, help="the HTML file to write (its folder must exist)")
    format_args(p, 'the file written, [{"number": null, "what": "report", "path"}]')
    gpu_check_args(
        add("gpu-check", commands["gpu-check"], "verify every knob combination of each workload here, each as a short trial")
    )
    return parser


def gpu_check_args(p: argparse.ArgumentParser) -> None:
    """`hpo gpu-check`: which combinations, how each runs, where the rows go."""
    from hpo.knobs.systems import TRIAL_KNOBS
    from hpo.workloads.catalog import SELF_CONTAINED_WORKLOADS

    def values(flag: str, choices, default, what: str) -> None:
        which = "all" if tuple(default) == tuple(choices) else " ".join(default)
        p.add_argument(
            flag,
            nargs="+",
            choices=choices,
            default=list(default),
            metavar=flag.removeprefix("--").upper(),
            help=f"{what}, any of: {' '.join(choices)} (default: {which})",
        )

    p.add_argument(
        "--workloads",
        nargs="+",
        default=list(SELF_CONTAINED_WORKLOADS),
        help=f"workloads to run each combination on, with their default options: built-in names or package.module:Class "
        f"(default: {' '.join(SELF_CONTAINED_WORKLOADS)}; the hf_* workloads need your files: `hpo probe SPACE.yaml`)",
    )
    for knob in TRIAL_KNOBS.values():
        every = tuple(knob.cli_text(v) for v in knob.values)
        chosen = every if knob.gpu_check_values is None else tuple(knob.cli_text(v) for v in knob.gpu_check_values)
        values(knob.flag, every, chosen, knob.help)
    p.add_argument("--compile-backend", default="inductor", help="torch.compile backend of compiled rows (default inductor)")
    p.add_argument("--batch-size", type=int, default=32, help="batch size of every combination (default 32)")
    p.add_argument("--steps", type=int, default=10, help="training steps after a passed probe (default 10)")
    p.add_argument("--device", default="auto", help="auto (the GPU if any), cpu, cuda:N or mps")
    p.add_argument("--timeout", type=float, default=1800, help="seconds one combination may take (default 1800)")
    p.add_argument("--out-dir", default=".", help="folder of gpu-<device>.jsonl (rows, resumed) and .md (table) (default .)")
