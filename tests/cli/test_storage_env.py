"""HPO_STORAGE is the default storage of every command that takes --storage, so a cluster script sets
it once (and keeps a password out of `ps`) instead of repeating --storage per command."""

from __future__ import annotations

import argparse

from hpo.app.cli import build_parser

URL = "postgresql+psycopg://hpo@db.example/hpo"


def _commands_with_storage(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return {name: p for name, p in sub.choices.items() if any(a.dest == "storage" for a in p._actions)}


def test_every_command_with_a_storage_reads_hpo_storage(monkeypatch):
    monkeypatch.setenv("HPO_STORAGE", URL)
    parser = build_parser()
    commands = _commands_with_storage(parser)
    assert {"run", "worker", "best", "export", "probe", "enqueue", "doctor", "dashboard", "report"} <= set(commands)
    needs = {"run": ["space.yaml"], "probe": ["space.yaml"], "export": ["-o", "x.yaml"], "report": ["-o", "r.html"]}
    for name in commands:
        study = ["--study", "s"] if any(a.dest == "study" and a.required for a in commands[name]._actions) else []
        args = parser.parse_args([name, *study, *needs.get(name, [])])
        assert args.storage == URL, name
        assert parser.parse_args([name, *study, *needs.get(name, []), "--storage", "sqlite:///x.db"]).storage == "sqlite:///x.db"


def test_without_hpo_storage_the_default_is_the_studys_sqlite_file(monkeypatch):
    monkeypatch.delenv("HPO_STORAGE", raising=False)
    assert build_parser().parse_args(["best", "--study", "s"]).storage is None  # -> sqlite:///studies/s.db
