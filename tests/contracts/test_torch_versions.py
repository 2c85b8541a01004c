"""What torch_compat chooses per torch version in hpo's window (2.13 to 2.14), and that the choice
holds on the torch installed: CI runs this file on 2.13.0 (scripts/test) and on 2.14.1
(scripts/test-torch-newest), so each version's branch meets its real torch."""

from __future__ import annotations

import importlib.metadata
import re
from pathlib import Path

import pytest

from hpo import torch_compat
from hpo.runtime import preload_lazy_imports


def test_every_module_the_trial_processes_preload_imports_on_the_installed_torch():
    preload_lazy_imports()  # on torch 2.14.1 it raised for torch.profiler._cupti_monitor, and `hpo train` exited 70


@pytest.mark.parametrize(
    "version,cupti_monitor",
    [("2.11.0+cu130", False), ("2.13.0", True), ("2.13.0+cpu", True), ("2.14.1+cu130", False), ("2.15.0a0+git1234", False)],
)
def test_the_cupti_monitor_is_preloaded_only_where_record_function_imports_it(monkeypatch, version, cupti_monitor):
    real = importlib.metadata.version
    monkeypatch.setattr(importlib.metadata, "version", lambda name: version if name == "torch" else real(name))
    modules = torch_compat.preloaded_torch_modules()
    assert "torch._dynamo" in modules
    assert ("torch.profiler._cupti_monitor" in modules) is cupti_monitor


ROOT = Path(__file__).resolve().parents[2]


def _pinned(script: str, variable: str) -> dict[str, str]:
    """The `pkg==version` pins a script's `VARIABLE="..."` line sets."""
    line = re.search(rf'^{variable}="([^"]+)"$', (ROOT / "scripts" / script).read_text(), re.MULTILINE)
    return dict(pin.split("==") for pin in line[1].split())


def test_the_torch_floor_pyproject_admits_is_the_torch_ci_tests_and_the_docs_list_both():
    oldest, newest = _pinned("_venv.sh", "TORCH_PIN"), _pinned("test-torch-newest", "NEWEST_PINS")
    floor = re.search(r'^ *"(torch[<>=!~][^"]*)"', (ROOT / "pyproject.toml").read_text(), re.MULTILINE)[1]
    assert floor == "torch>=" + ".".join(oldest["torch"].split(".")[:2]), f"{floor} admits a torch CI does not test ({oldest})"
    table = (ROOT / "docs" / "install.md").read_text()
    assert f"| {oldest['torch']} (" in table and f"| {newest['torch']} (" in table and f"| {newest['torchvision']} |" in table
