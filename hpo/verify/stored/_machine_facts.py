"""Facts this machine has proved about a model's knob combinations, kept between studies.

A user who runs many studies of one model on one machine would otherwise pay for the same sweep
each time. `hpo probe` and probe_first's opening sweep keep each combination's probe verdict, its
speed fact and the step times it was raced on in a folder of this machine (`facts_dir`: the
`HPO_MACHINE_FACTS` folder, else `$HPO_HOME/machine-facts`, else `~/.cache/hpo/machine-facts`),
one JSON file per key. The key hashes what decides the step, not the weights: the model's
signature (parameter and buffer names, shapes and dtypes, and its module classes), the batch's
tensor shapes (batch size and sequence length), the verdict's own facts (workload and options,
knobs, compile backend, device name, torch, hpo and library versions, slow ratio) and the CUDA and
cuDNN versions. A change in any of them is another key: the old entry is never read for it.

Each file is written whole under a temporary name and renamed (`hpo.files.write_atomic`), so
concurrent workers never leave a half-written entry: the last one to finish wins, whole. A file
that cannot be read is no fact: the combination is probed again.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from pathlib import Path

import torch

from hpo.files import write_atomic
from hpo.logging import get_logger

__all__ = ["ENV", "MachineFacts", "batch_signature", "facts_dir", "model_signature"]

_log = get_logger(__name__)
ENV = "HPO_MACHINE_FACTS"


def facts_dir() -> Path:
    """The folder of this machine's facts: `$HPO_MACHINE_FACTS`, `$HPO_HOME/machine-facts` or
    `~/.cache/hpo/machine-facts`."""
    if os.environ.get(ENV):
        return Path(os.environ[ENV]).expanduser()
    if os.environ.get("HPO_HOME"):
        return Path(os.environ["HPO_HOME"]).expanduser() / "machine-facts"
    return Path.home() / ".cache" / "hpo" / "machine-facts"


def model_signature(model: torch.nn.Module) -> str:
    """A hash of what decides the model's step, not its weights: every parameter's and buffer's
    name, shape and dtype, and the class of every module."""
    tensors = [(n, list(t.shape), str(t.dtype)) for n, t in [*model.named_parameters(), *model.named_buffers()]]
    classes = [f"{type(m).__module__}.{type(m).__qualname__}" for m in model.modules()]
    return _digest({"tensors": tensors, "modules": classes})


def batch_signature(batch) -> list:
    """The shapes and dtypes of a batch's tensors (its batch size and sequence length), in order."""
    if isinstance(batch, torch.Tensor):
        return [list(batch.shape), str(batch.dtype)]
    if isinstance(batch, dict):
        return [[k, batch_signature(v)] for k, v in sorted(batch.items())]
    if isinstance(batch, list | tuple):
        return [batch_signature(v) for v in batch]
    return [type(batch).__name__]


def _digest(facts) -> str:
    return hashlib.sha256(json.dumps(facts, sort_keys=True, default=str).encode()).hexdigest()[:24]


class MachineFacts:
    """This machine's stored facts. `fresh` (`hpo probe --fresh`) reads none, and writes what it
    measures anew."""

    def __init__(self, directory: str | os.PathLike | None = None, fresh: bool = False) -> None:
        self.directory = Path(directory) if directory is not None else facts_dir()
        self.fresh = fresh

    def key(self, signature: str, batch: list, verdict_facts: dict) -> tuple[str, dict]:
        """The key of one combination's facts, and the facts it hashes (kept in the entry)."""
        facts = {
            "model_signature": signature,
            "batch": batch,
            **verdict_facts,
            "cuda": torch.version.cuda,
            "cudnn": torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None,
        }
        return _digest(facts), facts

    def get(self, key: str) -> dict | None:
        if self.fresh:
            return None
        try:
            return json.loads((self.directory / f"{key}.json").read_text())
        except (OSError, ValueError):
            return None

    def put(self, key: str, entry: dict) -> bool:
        """Store `entry` under `key`, whole; False (said once on stderr) when the folder cannot take it."""
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
            write_atomic(self.directory / f"{key}.json", json.dumps({**entry, "at": time.time()}, default=str))
        except OSError as exc:
            _log.warning(
                f"hpo: this machine's facts were not kept in {self.directory} ({exc}); the next study measures them again"
            )
            return False
        return True

    def update(self, key: str, **fields) -> bool:
        """Add `fields` to the entry under `key` (read anew, fresh or not); False when there is none."""
        try:
            entry = json.loads((self.directory / f"{key}.json").read_text())
        except (OSError, ValueError):
            return False
        return self.put(key, {**entry, **fields})

    def entries(self) -> list[dict]:
        """Every readable entry, oldest first, each with its `key`."""
        found = []
        for path in sorted(self.directory.glob("*.json")) if self.directory.is_dir() else []:
            try:
                found.append({"key": path.stem, **json.loads(path.read_text())})
            except (OSError, ValueError):
                continue
        return sorted(found, key=lambda e: e.get("at", 0))
