"""The runnable-here check (`hpo.verify.machine._kernel_check`) has two layers, and each would hide the other's
bug: a value's registry needs (a package, a device type, a probe), then its kernel run once with
the refusals `known_failures` knows. Each is tested here with the other taken out. On this CPU the
optional GPU packages (xformers, flash-attn, apex) are missing, as the rules for this project keep
them."""

from __future__ import annotations

import torch

from hpo.hardware import probes
from hpo.verify.machine import _kernel_check as runnable

CUDA = torch.device("cuda")  # a device type, no GPU needed: the needs layer builds no tensor
CPU = torch.device("cpu")
SYSTEMS = {"precision": ["fp32"], "attention": ["xformers", "flash_attn", "sdpa"], "optimizer": ["apex", "forloop"]}
MISSING = {("attention", "xformers"): "xformers", ("attention", "flash_attn"): "flash-attn", ("optimizer", "apex"): "apex"}


def _excluded(check) -> dict:
    return {n.part[0]: n.why for n in check.not_runnable}


def test_the_needs_layer_alone_refuses_a_missing_package_on_the_device_its_kernels_exist_for(monkeypatch):
    # The kernel layer taken out: every value it would run passes.
    monkeypatch.setattr(runnable, "_attention_refusals", lambda name, precisions, device: ([], []))
    monkeypatch.setattr(runnable, "_optimizer_refusals", lambda name, precisions, device: ([], []))
    monkeypatch.setattr(probes, "device_model", lambda device: "a CUDA device")  # asks no driver
    for (knob, value), package in MISSING.items():
        cap = runnable.value_capability(knob, value, CUDA)  # CUDA: the device-type need cannot hide the package
        assert not cap.usable and package in cap.why, (knob, value, cap)
    excluded = _excluded(runnable.check_values(SYSTEMS, CUDA))
    assert set(excluded) == set(MISSING)
    assert all(package in excluded[part] for part, package in MISSING.items())


def test_the_kernel_layer_alone_refuses_a_missing_package_by_its_known_failure(monkeypatch):
    # The needs layer taken out: every value is usable by its needs, so only the kernel run can refuse.
    monkeypatch.setattr(runnable, "value_capability", lambda knob, value, device: probes.Capability(True))
    check = runnable.check_values(SYSTEMS, CPU)
    excluded = _excluded(check)
    assert set(excluded) == set(MISSING) and not check.unchecked, check
    assert all(package in excluded[part] for part, package in MISSING.items())
