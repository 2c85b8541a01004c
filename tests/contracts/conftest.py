"""`gpu_fakes`: the CPU references of flash-attn, xformers and NVIDIA apex installed under their
real module names, so hpo's loaders (`hpo.deps`), knob builders and probe run against them."""

from __future__ import annotations

import dataclasses
import importlib.machinery
import sys
import types

import pytest

from contracts.fakes import apex as fake_apex
from contracts.fakes import flash_attn as fake_flash_attn
from contracts.fakes import xformers_ops as fake_xformers_ops
from hpo import deps
from hpo.knobs import registry
from hpo.runtime._machine_check import forget_checks

_MODULE_DUNDERS = {"__name__", "__spec__", "__loader__", "__package__", "__file__", "__cached__", "__builtins__"}


def _module(name: str, source: types.ModuleType | None = None, **attrs) -> types.ModuleType:
    module = types.ModuleType(name)
    module.__dict__.update({k: v for k, v in vars(source).items() if k not in _MODULE_DUNDERS} if source else {})
    module.__dict__.update(attrs)
    module.__spec__ = importlib.machinery.ModuleSpec(name, None)  # importlib.util.find_spec reads it
    return module


@pytest.fixture
def gpu_fakes(monkeypatch):
    """Install the fakes; lift the CUDA-only device requirement of their knob values (a test seam:
    the fakes run on the CPU, the product's requirement stays CUDA)."""
    flash_attn = _module("flash_attn", fake_flash_attn)
    xformers = _module("xformers", __version__=fake_xformers_ops.__version__)
    xformers.ops = _module("xformers.ops", fake_xformers_ops)
    apex = _module("apex")
    apex.optimizers = _module("apex.optimizers", FusedAdam=fake_apex.FusedAdam)
    amp_c = _module("amp_C", multi_tensor_adam=fake_apex.multi_tensor_adam)
    for module in (flash_attn, xformers, xformers.ops, apex, apex.optimizers, amp_c):
        monkeypatch.setitem(sys.modules, module.__name__, module)
    for table, name in (
        (registry.ATTENTION_SPECS, "flash_attn"),
        (registry.ATTENTION_SPECS, "xformers"),
        (registry.OPTIMIZER_SPECS, "apex"),
    ):
        spec = table[name]
        needs = dataclasses.replace(spec.needs, devices=(*spec.needs.devices, "cpu"))
        monkeypatch.setitem(table, name, dataclasses.replace(spec, needs=needs))
    deps._import.cache_clear()
    forget_checks()  # a worker's check of this machine, made before the fakes were in, is stale
    yield types.SimpleNamespace(flash_attn=flash_attn, xformers_ops=xformers.ops, apex_optimizers=apex.optimizers)
    deps._import.cache_clear()
    forget_checks()
