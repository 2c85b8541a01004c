"""hpo's own code imports another package's names through that package's public face (its
`__init__`'s `__all__`), never from its private `_module.py` files: a private module can be split,
renamed or merged without touching its users, as in Optuna. Inside its own package a module imports
its siblings directly. The benchmarks and the examples are users too; tests may reach a private
module where they test it.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
USERS = ("hpo", "benchmarks", "examples")


def _private(segment: str) -> bool:
    return segment.startswith("_") and not segment.startswith("__")


def _imported(tree: ast.AST) -> list[tuple[int, str]]:
    """(line, dotted name) of every module an import names: `from a.b import c` names a.b and a.b.c."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.append((node.lineno, node.module))
            found += [(node.lineno, f"{node.module}.{alias.name}") for alias in node.names]
    return found


def private_imports(path: Path) -> list[str]:
    """The imports in `path` of an hpo private module from outside the package that holds it."""
    rel = path.relative_to(ROOT).with_suffix("")
    importer = ".".join(rel.parts[:-1] if rel.name == "__init__" else rel.parts)
    wrong = []
    for line, name in _imported(ast.parse(path.read_text())):
        parts = name.split(".")
        if parts[0] != "hpo":
            continue
        for i, part in enumerate(parts):
            if _private(part):
                home = ".".join(parts[:i])
                if importer != home and not importer.startswith(home + "."):
                    wrong.append(f"{path.relative_to(ROOT)}:{line} imports {name} (import it from {home})")
                break
    return wrong


def test_hpo_imports_other_packages_through_their_faces():
    paths = [p for user in USERS for p in sorted((ROOT / user).rglob("*.py"))]
    wrong = [line for path in paths for line in private_imports(path)]
    assert not wrong, "\n".join(wrong)


@pytest.mark.parametrize(
    ("source", "where", "wrong"),
    [
        ("from hpo.verify.timing._steady import time_model\n", "hpo/trial/x.py", True),
        ("from hpo.verify.timing import _steady\n", "hpo/trial/x.py", True),
        ("import hpo.strategy._race\n", "benchmarks/x.py", True),
        ("from hpo.verify.timing import time_model\n", "hpo/trial/x.py", False),
        ("from hpo.verify.timing._steady import time_model\n", "hpo/verify/timing/_slow_limit.py", False),
        ("from hpo.verify.timing._steady import time_model\n", "hpo/verify/timing/__init__.py", False),
    ],
)
def test_the_scan_tells_a_private_import_from_a_face(tmp_path, monkeypatch, source, where, wrong):
    path = tmp_path / where
    path.parent.mkdir(parents=True)
    path.write_text(source)
    monkeypatch.setitem(globals(), "ROOT", tmp_path)
    assert bool(private_imports(path)) is wrong
