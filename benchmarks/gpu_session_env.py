"""The environment step of `scripts/gpu-session`: one line `ENV {json}` on stdout, whatever this
machine lacks. Python's version always; torch's, CUDA's, cuDNN's and the GPU's when torch imports
(else torch's import error); each package hpo needs, its version or None when it is not installed.

    python -m benchmarks.gpu_session_env

Standard library apart from torch, which it only tries: it runs whether or not the carried wheels
were installed.
"""

from __future__ import annotations

import importlib.metadata
import json
import sys

__all__ = ["PACKAGES", "environment"]

# hpo's dependencies a session runs with, beyond torch (pyproject.toml): the wheels carry the
# first six, the machine's image the others.
PACKAGES = ("optuna", "sqlalchemy", "pydantic", "cmaes", "colorlog", "alembic", "pyyaml", "numpy", "transformers", "lightning")


def _version(name: str) -> str | None:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def _torch() -> dict:
    try:
        import torch
    except Exception as exc:  # noqa: BLE001 - a broken torch is reported, not raised: the line must print
        return {"torch": None, "torch_error": f"{type(exc).__name__}: {exc}"}
    info = {"torch": torch.__version__, "cuda": torch.version.cuda, "cudnn": None, "device": None}
    try:
        info["cudnn"] = torch.backends.cudnn.version()
        info["device"] = torch.cuda.get_device_name() if torch.cuda.is_available() else None
    except Exception as exc:  # noqa: BLE001 - a driver that fails to start is a finding, not a crash
        info["cuda_error"] = f"{type(exc).__name__}: {exc}"
    return info


def environment() -> dict:
    return {"python": sys.version.split()[0], **_torch(), "packages": {name: _version(name) for name in PACKAGES}}


if __name__ == "__main__":
    print("ENV " + json.dumps(environment()), flush=True)
