"""What torch_compat chooses per torch version in hpo's window (2.13 to 2.14), and that the choice
holds on the torch installed: CI runs this file on 2.13.0 (scripts/test) and on 2.14.1
(scripts/test-torch-newest), so each version's branch meets its real torch."""

from __future__ import annotations

import importlib.metadata

import pytest

from hpo import torch_compat
from hpo.runtime.forkserver_warmup import preload_lazy_imports


def test_every_module_the_trial_processes_preload_imports_on_the_installed_torch():
    preload_lazy_imports()  # on torch 2.14.1 it raised for torch.profiler._cupti_monitor, and `hpo train` exited 70


@pytest.mark.parametrize(
    "version,cupti_monitor", [("2.13.0", True), ("2.13.0+cpu", True), ("2.14.1+cu130", False), ("2.15.0a0+git1234", False)]
)
def test_the_cupti_monitor_is_preloaded_only_where_record_function_imports_it(monkeypatch, version, cupti_monitor):
    real = importlib.metadata.version
    monkeypatch.setattr(importlib.metadata, "version", lambda name: version if name == "torch" else real(name))
    modules = torch_compat.preloaded_torch_modules()
    assert "torch._dynamo" in modules
    assert ("torch.profiler._cupti_monitor" in modules) is cupti_monitor
