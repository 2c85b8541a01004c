"""Each package exposes a curated public API in its `__init__.py`, as Optuna does, imported only
when a name is used: `import hpo.verify` costs the cheap commands no torch import."""

from __future__ import annotations

import ast
import importlib
import inspect
import json
import pkgutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = (
    "app",
    "config",
    "engine",
    "evidence",
    "hardware",
    "knobs",
    "parallel",
    "reporting",
    "runtime",
    "storage",
    "strategy",
    "study",
    "trial",
    "verify",
    "verify.fault",
    "verify.machine",
    "verify.peaks",
    "verify.probing",
    "verify.stored",
    "verify.timing",
    "workloads",
)


def assigned_names(module) -> set[str]:
    """The names `module`'s own top-level code assigns (not the ones it imports)."""
    names = set()
    for node in ast.parse(inspect.getsource(module)).body:
        targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(node, ast.AnnAssign) else []
        names.update(target.id for target in targets if isinstance(target, ast.Name))
    return names


def defining_module(package: str, public: str, value: object) -> str:
    """The module whose own code defines `value`: a class or function says so itself; a constant is
    looked for among the package's imported submodules that assign it."""
    # A cached function (`functools.cache`) is a wrapper: its function says where it is defined.
    if inspect.isclass(value) or inspect.isfunction(inspect.unwrap(value)):
        return value.__module__
    assigning = [
        name for name, module in list(sys.modules.items()) if name.startswith(f"{package}.") and public in assigned_names(module)
    ]
    assert assigning, f"no submodule of {package} assigns {public}"
    return assigning[0]


@pytest.mark.parametrize("name", PACKAGES)
def test_every_public_name_resolves_to_its_definition(name):
    package = importlib.import_module(f"hpo.{name}")
    submodules = {info.name for info in pkgutil.iter_modules(package.__path__)}
    assert package.__all__ and sorted(dir(package)) == sorted(package.__all__)
    for public in package.__all__:
        # Importing a submodule binds it on the package under its own name, and `__getattr__` is
        # asked only for a missing attribute: a public name that is also a submodule's name would
        # resolve to the function before that import and to the module after it.
        assert public not in submodules, f"hpo.{name}.{public} is also a submodule's name"
        value = getattr(package, public)
        home = defining_module(package.__name__, public, value)
        assert home.startswith(f"hpo.{name}."), f"hpo.{name}.{public} is defined in {home}, outside the package"
        assert getattr(sys.modules[home], public) is value
    with pytest.raises(AttributeError, match=f"module 'hpo.{name}' has no attribute 'nothing_here'"):
        package.nothing_here  # noqa: B018


def test_importing_the_packages_imports_no_torch():
    script = f"import json, sys; [__import__('hpo.' + p) for p in {list(PACKAGES)!r}]; print(json.dumps('torch' in sys.modules))"
    done = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) is False


def test_a_public_name_is_the_submodules_own():
    from hpo.verify import run_probe
    from hpo.verify.probing._probe import run_probe as defined

    assert run_probe is defined
