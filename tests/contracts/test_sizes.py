"""The size bounds CONTRIBUTING.md states, checked: a module of hpo is at most MODULE_LINES lines, a
function's code (its body below the docstring) at most FUNCTION_LINES. The modules and functions
over them when the bound was first checked are listed with their size: one listed may shrink (and
leaves the list once within the bound), never grow, and nothing new joins it. Splitting one is the
way off the list.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
MODULE_LINES = 250
FUNCTION_LINES = 20

# Over MODULE_LINES, each with its lines and why it is not split yet.
MODULES_OVER = {
    # Every private torch API hpo uses, in one module on purpose, so that a torch upgrade has one
    # place to mend (tests/contracts/test_private_torch_apis.py scans it).
    "hpo/torch_compat.py": 278,
}

# Over FUNCTION_LINES: "path::qualified name" and its lines of code.
FUNCTIONS_OVER = {}


def module_lines(path: Path) -> int:
    return len(path.read_text().splitlines())


def function_sizes(path: Path) -> dict[str, int]:
    """Each function's (and method's) qualified name and its lines of code: from the first statement
    below its docstring to its last line. Signatures and docstrings are not code."""
    sizes = {}

    def visit(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                name = f"{prefix}{child.name}"
                body = child.body
                documented = (
                    isinstance(body[0], ast.Expr)
                    and isinstance(body[0].value, ast.Constant)
                    and isinstance(body[0].value.value, str)
                )
                code = body[1:] if documented else body
                if code:
                    sizes[name] = child.end_lineno - code[0].lineno + 1
                visit(child, f"{name}.")
            elif isinstance(child, ast.ClassDef):
                visit(child, f"{prefix}{child.name}.")
            else:
                visit(child, prefix)

    visit(ast.parse(path.read_text()), "")
    return sizes


def _sources() -> list[Path]:
    return sorted((ROOT / "hpo").rglob("*.py"))


def test_modules_fit_the_bound():
    sizes = {str(p.relative_to(ROOT)): module_lines(p) for p in _sources()}
    over = {path: n for path, n in sizes.items() if n > MODULE_LINES}
    grown = [
        f"{p}: {n} lines (listed at {MODULES_OVER[p]})" for p, n in over.items() if p in MODULES_OVER and n > MODULES_OVER[p]
    ]
    new = [f"{p}: {n} lines, over {MODULE_LINES}: split it" for p, n in over.items() if p not in MODULES_OVER]
    fitted = [f"{p}: now {sizes.get(p, 0)} lines, remove it from MODULES_OVER" for p in MODULES_OVER if p not in over]
    assert not (grown + new + fitted), "\n".join(grown + new + fitted)


def test_functions_fit_the_bound():
    sizes = {f"{p.relative_to(ROOT)}::{name}": n for p in _sources() for name, n in function_sizes(p).items()}
    over = {name: n for name, n in sizes.items() if n > FUNCTION_LINES}
    grown = [
        f"{f}: {n} lines (listed at {FUNCTIONS_OVER[f]})"
        for f, n in over.items()
        if f in FUNCTIONS_OVER and n > FUNCTIONS_OVER[f]
    ]
    new = [f"{f}: {n} lines of code, over {FUNCTION_LINES}: split it" for f, n in over.items() if f not in FUNCTIONS_OVER]
    fitted = [f"{f}: now {sizes.get(f, 0)} lines, remove it from FUNCTIONS_OVER" for f in FUNCTIONS_OVER if f not in over]
    assert not (grown + new + fitted), "\n".join(grown + new + fitted)


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ('def f():\n    """Doc\n    more."""\n    a = 1\n    return a\n', {"f": 2}),
        ("class C:\n    def m(self,\n          x):\n        return x\n", {"C.m": 1}),
        ("def f():\n    def g():\n        return 1\n    return g\n", {"f": 3, "f.g": 1}),
    ],
)
def test_a_functions_code_is_counted_without_its_signature_or_docstring(tmp_path, source, expected):
    path = tmp_path / "m.py"
    path.write_text(source)
    assert function_sizes(path) == expected
