"""Arguments several `hpo` subcommands share: the study and its storage, the output format, `--top`."""

from __future__ import annotations

import argparse
import os

__all__ = ["TOP_DEFAULT", "format_args", "space_arg", "storage_arg", "storage_args", "top_arg"]

TOP_DEFAULT = 3  # `--top` alone, in `hpo export` and `hpo enqueue` alike


def space_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument("space", help="the search-space YAML file (an exported config is one)")


def storage_args(p: argparse.ArgumentParser, study_required: bool = True, study_help: str = "study name") -> None:
    p.add_argument("--study", required=study_required, help=study_help)
    storage_arg(p, "SQLAlchemy URL (default: $HPO_STORAGE if set, else sqlite:///studies/<study>.db)")


def storage_arg(p: argparse.ArgumentParser, help_text: str) -> None:
    p.add_argument("--storage", default=os.environ.get("HPO_STORAGE"), help=help_text)


def format_args(p: argparse.ArgumentParser, json_shape: str) -> None:
    """`--format table|json`, and `--json`: its older spelling, kept as an alias."""
    p.add_argument(
        "--format",
        choices=["table", "json"],
        default="table",
        help=f"table: for people (default); json: {json_shape} (shapes: docs/cli.md)",
    )
    p.add_argument("--json", dest="format", action="store_const", const="json", help="alias of --format json")


def top_arg(p, help_text: str, **kwargs) -> None:
    """`--top [K]`; `p` is a parser or a mutually exclusive group of one."""
    kwargs.setdefault("nargs", "?")
    p.add_argument(
        "--top",
        type=int,
        const=TOP_DEFAULT,
        metavar="K",
        help=f"{help_text}; K is {TOP_DEFAULT} if omitted, as in `hpo export` and `hpo enqueue`",
        **kwargs,
    )
