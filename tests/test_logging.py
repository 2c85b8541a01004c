"""Library code logs through the "hpo" logger instead of printing: the CLI sets its verbosity (-v/-q),
and an application embedding hpo can silence it or route it to its own handler."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
import torch

import hpo.logging as hpo_logging
from hpo.app.cli import main
from hpo.verify.probing._kept_reference import ComparedReference, ReferenceFiles

SPACE = Path(__file__).resolve().parents[1] / "search_spaces" / "quickstart.yaml"


@pytest.fixture(autouse=True)
def _restore_hpo_logger():
    root = logging.getLogger("hpo")
    saved = (root.level, list(root.handlers), root.propagate)
    yield
    root.setLevel(saved[0])
    root.handlers[:] = saved[1]
    root.propagate = saved[2]


def _unkept_reference(tmp_path: Path) -> None:
    """A reference folder that cannot take the file: hpo says so (a warning) and goes on."""
    missing = ReferenceFiles(tmp_path / "gone")
    assert not missing.put("k", ComparedReference(1.0, [torch.zeros(2)], {"w": torch.zeros(2)}, 4))


def test_library_warnings_reach_stderr_by_default_and_go_when_silenced(tmp_path, capsys):
    _unkept_reference(tmp_path)
    assert "later probes run it again" in capsys.readouterr().err
    hpo_logging.set_verbosity(logging.ERROR)
    _unkept_reference(tmp_path)
    assert capsys.readouterr().err == ""


def test_an_embedding_application_routes_hpo_logs_to_its_own_handler(tmp_path, capsys):
    seen: list[logging.LogRecord] = []
    handler = logging.Handler()
    handler.emit = seen.append
    hpo_logging.disable_default_handler()
    logging.getLogger("hpo").addHandler(handler)
    _unkept_reference(tmp_path)
    assert capsys.readouterr().err == ""  # not printed
    assert [(r.name, r.levelno) for r in seen] == [("hpo.verify.probing._kept_reference", logging.WARNING)]


@pytest.mark.parametrize(("flag", "level"), [([], logging.INFO), (["-q"], logging.ERROR), (["-v"], logging.DEBUG)])
def test_the_cli_sets_the_verbosity(flag, level, capsys):
    assert main([*flag, "validate", str(SPACE)]) == 0
    assert logging.getLogger("hpo").level == level
    assert "ok" in capsys.readouterr().out  # a command's result is not logging: -q keeps it
