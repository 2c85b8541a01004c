"""A package's public names, imported when first used (PEP 562), as `optuna` re-exports its
submodules' names: `from hpo.verify import run_probe` works, and `import hpo.verify` imports no
torch, which the cheap commands (`hpo validate`, `best`, `export`) must not pay for."""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping

__all__ = ["lazy_exports"]


def lazy_exports(package: str, where: Mapping[str, str]) -> tuple[Callable[[str], object], Callable[[], list[str]]]:
    """The package's `__getattr__` and `__dir__`: `where` maps each public name to the submodule
    (relative to `package`) that defines it."""

    def __getattr__(name: str) -> object:
        if name not in where:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        return getattr(importlib.import_module(f"{package}.{where[name]}"), name)

    def __dir__() -> list[str]:
        return sorted(where)

    return __getattr__, __dir__
