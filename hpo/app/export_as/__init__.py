"""`hpo export --as hf|lightning|python`: the winning trial in the terms of the tool that will run it.

Every output is built from the knobs the trial OBSERVED (`winner.py`): a knob the tool cannot
express is said in a comment line, never dropped. One module per target tool.
"""

from __future__ import annotations

import json
from pathlib import Path

import optuna

from hpo.app.export_as.hf import hf_arguments
from hpo.app.export_as.lightning_trainer import lightning_arguments
from hpo.app.export_as.python_loop import python_snippet
from hpo.app.export_as.torchrun import write_torchrun
from hpo.app.export_as.winner import Winner, winner_of
from hpo.errors import UserInputError
from hpo.knobs.systems.attention import HF_ATTN

__all__ = ["FORMATS", "HF_ATTN", "Winner", "export_as", "hf_arguments", "lightning_arguments", "python_snippet", "winner_of"]

FORMATS = ("hf", "lightning", "python")


def export_as(trial: optuna.trial.FrozenTrial, fmt: str, output: Path | None) -> list[Path] | str:
    """Write the trial in `fmt`'s terms to the folder `output` (the snippet: to the file, or
    returned for printing when no output is given)."""
    if fmt not in FORMATS:
        raise UserInputError(f"--as must be one of {list(FORMATS)}, but got {fmt!r}")
    w = winner_of(trial)
    if fmt == "python":
        return _python_export(trial, w, output)
    if output is None:
        raise UserInputError(f"--as {fmt} needs -o DIR: the folder to write its files to")
    if output.exists() and not output.is_dir():
        raise UserInputError(f"-o {output}: with --as {fmt} the output is a folder, and this is a file")
    return _write_kwargs_folder(w, fmt, output)


def _python_export(trial: optuna.trial.FrozenTrial, w: Winner, output: Path | None) -> list[Path] | str:
    """The snippet, returned without `output`; else written there, with the torchrun script of a trial of ranks."""
    snippet = python_snippet(w)
    if output is None:
        return snippet
    output.write_text(snippet)
    return [output, *write_torchrun(trial, w, output)]


def _write_kwargs_folder(w: Winner, fmt: str, output: Path) -> list[Path]:
    """The two kwargs files of `fmt` (hf or lightning) and NOTES.txt, in the folder `output`."""
    first, second, notes = hf_arguments(w) if fmt == "hf" else lightning_arguments(w)
    names = ("training_args.json", "model_kwargs.json") if fmt == "hf" else ("trainer_kwargs.json", "optimizer_kwargs.json")
    output.mkdir(parents=True, exist_ok=True)
    written = []
    for name, content in zip(names, (first, second)):
        (output / name).write_text(json.dumps(content, indent=2) + "\n")
        written.append(output / name)
    (output / "NOTES.txt").write_text("\n".join(notes) + "\n")
    return [*written, output / "NOTES.txt"]
