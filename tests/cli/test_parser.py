"""The parser's one shape: every option has help, every command that prints results takes
`--format table|json` with `--json` as its alias, and the renamed flags keep their old spelling."""

from __future__ import annotations

import argparse

import pytest

from hpo.app.cli import build_parser
from hpo.app.parser import TOP_DEFAULT

PRINTS_RESULTS = {"validate", "run", "best", "export", "probe", "enqueue", "train", "doctor", "report"}


def _commands() -> dict[str, argparse.ArgumentParser]:
    parser = build_parser()
    return next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices


def test_every_option_and_argument_of_every_command_has_help():
    missing = [
        f"hpo {name} {action.option_strings or action.dest}"
        for name, sub in _commands().items()
        for action in sub._actions
        if not action.help or not action.help.strip()
    ]
    assert not missing, f"options without help text: {missing}"


def test_the_commands_that_print_results_take_format_with_json_as_its_alias():
    have = {name for name, sub in _commands().items() if any(a.dest == "format" for a in sub._actions)}
    assert have == PRINTS_RESULTS
    needs = {"validate": ["s.yaml"], "run": ["s.yaml"], "probe": ["s.yaml"], "train": ["c.yaml"], "report": ["-o", "r.html"]}
    needs |= {"best": ["--study", "s"], "export": ["--study", "s"], "enqueue": ["--study", "s", "c.yaml"]}
    needs["report"] += ["--study", "s"]
    parser = build_parser()
    for name in PRINTS_RESULTS:
        argv = [name, *needs.get(name, [])]
        assert parser.parse_args(argv).format == "table", name
        assert parser.parse_args([*argv, "--json"]).format == "json", name
        assert parser.parse_args([*argv, "--format", "json"]).format == "json", name


def test_format_refuses_an_unknown_name(capsys):
    with pytest.raises(SystemExit) as stop:
        build_parser().parse_args(["best", "--study", "s", "--format", "yaml"])
    assert stop.value.code == 2 and "invalid choice: 'yaml'" in capsys.readouterr().err


def test_enqueue_names_its_target_study_the_same_in_both_modes_and_keeps_the_old_spelling():
    parser = build_parser()
    assert parser.parse_args(["enqueue", "--study", "b", "c.yaml"]).study == "b"
    assert parser.parse_args(["enqueue", "--study", "b", "--from-study", "a"]).study == "b"
    assert parser.parse_args(["enqueue", "--to-study", "b", "--from-study", "a"]).study == "b"


@pytest.mark.parametrize("command", [["export", "--study", "a", "-o", "top"], ["enqueue", "--study", "b", "--from-study", "a"]])
def test_top_means_the_same_k_in_export_and_enqueue(command):
    parser = build_parser()
    assert parser.parse_args([*command, "--top"]).top == TOP_DEFAULT
    assert parser.parse_args([*command, "--top", "5"]).top == 5
    help_text = next(a.help for a in _commands()[command[0]]._actions if a.dest == "top")
    assert f"K is {TOP_DEFAULT} if omitted" in help_text
