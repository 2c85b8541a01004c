"""Each package exposes a curated public API in its `__init__.py`, as Optuna does, imported only
when a name is used: `import hpo.verify` costs the cheap commands no torch import."""

from __future__ import annotations

import importlib
import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("config", "engine", "evidence", "hardware", "knobs", "trial", "verify", "workloads")


@pytest.mark.parametrize("name", PACKAGES)
def test_every_public_name_resolves_to_its_definition(name):
    package = importlib.import_module(f"hpo.{name}")
    assert package.__all__ and sorted(dir(package)) == sorted(package.__all__)
    for public in package.__all__:
        assert getattr(package, public) is not None
    with pytest.raises(AttributeError, match=f"module 'hpo.{name}' has no attribute 'nothing_here'"):
        package.nothing_here  # noqa: B018


def test_importing_the_packages_imports_no_torch():
    script = f"import json, sys; [__import__('hpo.' + p) for p in {list(PACKAGES)!r}]; print(json.dumps('torch' in sys.modules))"
    done = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) is False


def test_a_public_name_is_the_submodules_own():
    from hpo.verify import run_probe
    from hpo.verify.probe import run_probe as defined

    assert run_probe is defined
