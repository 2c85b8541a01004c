"""Private torch APIs are used only in hpo/torch_compat.py, so a torch upgrade has one module to mend.

The scan reads every module of the package: an attribute chain from a torch import with a segment
that starts with an underscore (`torch._dynamo.reset`, `F._pad`, `torch.ops.mkldnn._x`), an import
from a private torch module, or a string naming one (a preload list) outside torch_compat fails. In
a module that imports torch, so does a private attribute of any object but `self` and `cls`
(`scaler._get_scale_async()`, `getattr(optimizer, "_step_supports_amp_scaling")`): there, such an
object is most likely torch's.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import hpo

PACKAGE = Path(hpo.__file__).parent
COMPAT = PACKAGE / "torch_compat.py"
# Private attributes that are not torch's, in modules that import torch: transformers' config
# switch for the attention implementation, which it has no public reader for.
NOT_TORCH = {"_attn_implementation"}
PRIVATE_MODULE_NAME = re.compile(r"torch(\.\w+)*\._[a-zA-Z]\w*(\.\w+)*")


def _private(segment: str) -> bool:
    return segment.startswith("_") and not segment.startswith("__")


def _torch_names(tree: ast.Module) -> set[str]:
    """The local names bound to torch or to something imported from it."""
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names |= {alias.asname or alias.name.split(".")[0] for alias in node.names if alias.name.split(".")[0] == "torch"}
        elif isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "torch":
            names |= {alias.asname or alias.name for alias in node.names}
    return names


def _chain(node: ast.Attribute) -> tuple[str | None, list[str]]:
    """The root name and the attribute names of `a.b.c` (root None when it is not a plain name)."""
    attrs: list[str] = []
    current: ast.expr = node
    while isinstance(current, ast.Attribute):
        attrs.insert(0, current.attr)
        current = current.value
    return (current.id if isinstance(current, ast.Name) else None), attrs


def _private_attribute_of_an_object(node: ast.AST, torch_names: set[str]) -> bool:
    """`obj._name` or `getattr(obj, "_name")`, where obj is not self, cls or torch (seen apart)."""
    if isinstance(node, ast.Attribute) and _private(node.attr) and node.attr not in NOT_TORCH:
        return not (isinstance(node.value, ast.Name) and node.value.id in ("self", "cls", *torch_names))
    if isinstance(node, ast.Call) and getattr(node.func, "id", None) in ("getattr", "setattr", "hasattr"):
        name = node.args[1] if len(node.args) > 1 else None
        return isinstance(name, ast.Constant) and isinstance(name.value, str) and _private(name.value)
    return False


def private_torch_uses(source: str) -> list[str]:
    """Each private torch use in a module's source, as `line: what`."""
    tree = ast.parse(source)
    torch_names, found = _torch_names(tree), []
    inner = {id(node.value) for node in ast.walk(tree) if isinstance(node, ast.Attribute)}  # a.b of a.b.c
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and id(node) not in inner:
            root, attrs = _chain(node)
            if root in torch_names and any(map(_private, attrs)):
                found.append(f"{node.lineno}: {root}.{'.'.join(attrs)}")
        if torch_names and _private_attribute_of_an_object(node, torch_names):
            found.append(f"{node.lineno}: {ast.unparse(node)}")
        elif isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "torch":
            names = node.module.split(".") + [alias.name for alias in node.names]
            if any(map(_private, names)):
                found.append(f"{node.lineno}: from {node.module} import ...")
        elif isinstance(node, ast.Import):
            found += [f"{node.lineno}: import {a.name}" for a in node.names if PRIVATE_MODULE_NAME.fullmatch(a.name)]
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and PRIVATE_MODULE_NAME.fullmatch(node.value):
            found.append(f"{node.lineno}: {node.value!r}")
    return sorted(set(found))


def test_private_torch_apis_only_in_torch_compat():
    offenders = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        if path == COMPAT:
            continue
        uses = private_torch_uses(path.read_text())
        if uses:
            offenders[str(path.relative_to(PACKAGE.parent))] = uses
    assert not offenders, f"private torch APIs must go through hpo/torch_compat.py, but found {offenders}"


def test_the_scan_finds_each_kind_of_private_use():
    source = (
        "import torch\nimport torch.nn.functional as F\nfrom torch.utils._python_dispatch import TorchDispatchMode\n"
        "torch._dynamo.reset()\nF._pad(x)\ntorch.ops.mkldnn._is_mkldnn_fp16_supported()\n"
        "PRELOAD = ['torch._dynamo']\ntorch.cuda.is_available()\ntorch.__version__\n"
        "scaler._get_scale_async()\ngetattr(opt, '_step_supports_amp_scaling', False)\nself._own = 1\n"
    )
    assert private_torch_uses(source) == sorted(
        [
            "3: from torch.utils._python_dispatch import ...",
            "4: torch._dynamo.reset",
            "5: F._pad",
            "6: torch.ops.mkldnn._is_mkldnn_fp16_supported",
            "7: 'torch._dynamo'",
            "10: scaler._get_scale_async",
            "11: getattr(opt, '_step_supports_amp_scaling', False)",
        ]
    )
