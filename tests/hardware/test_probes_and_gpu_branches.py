"""Capability probes on this CPU, and the CUDA branches exercised by monkeypatching the probes."""

from __future__ import annotations

import sys

import pytest
import torch

from hpo import deps
from hpo.app import doctor
from hpo.errors import KnobUnavailable
from hpo.hardware import _allocator as allocator
from hpo.hardware import probes, trial_runtime

CPU = torch.device("cpu")
FAKE_GPU = torch.device("cuda", 0)


def test_doctor_reports_what_runs_on_this_cpu():
    report = doctor.capability_report(CPU)
    assert report["device_type"] == "cpu" and report["torch_version"] == torch.__version__
    assert report["attention"]["sdpa_flash"]["usable"] and report["attention"]["sdpa_math"]["usable"]
    assert not report["attention"]["sdpa_efficient"]["usable"]
    assert "No viable backend" in report["attention"]["sdpa_efficient"]["why"]
    assert not report["attention"]["flash_attn"]["usable"] and "flash-attn" in report["attention"]["flash_attn"]["why"]
    assert report["optimizer"]["fused"]["usable"] and not report["optimizer"]["apex"]["usable"]
    assert not report["precision"]["tf32"]["usable"]
    text = doctor.format_report(report)
    assert "sdpa_efficient      no" in text and "fused               yes" in text


def test_bf16_on_an_old_gpu_is_reported_unusable(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *a, **k: False)
    monkeypatch.setattr(probes, "compute_capability", lambda device: (7, 0))
    cap = probes.bf16_supported(FAKE_GPU)
    assert not cap.usable and "(7, 0) < 8.0" in cap.why


@pytest.mark.parametrize("cc,usable", [((7, 5), False), ((8, 0), True), ((9, 0), True)])
def test_tf32_needs_ampere(monkeypatch, cc, usable):
    monkeypatch.setattr(probes, "compute_capability", lambda device: cc)
    assert probes.tf32_supported(FAKE_GPU).usable is usable


def test_flash_attn_on_a_pre_ampere_gpu_is_unusable(monkeypatch):
    monkeypatch.setattr(probes, "compute_capability", lambda device: (7, 5))
    cap = probes.flash_attn_arch_supported(FAKE_GPU)
    assert not cap.usable and "compute capability >= 8.0" in cap.why
    monkeypatch.setattr(probes, "compute_capability", lambda device: (9, 0))
    assert probes.flash_attn_arch_supported(FAKE_GPU).usable


def test_the_pypi_web_toolkit_named_apex_is_not_nvidia_apex(tmp_path, monkeypatch):
    package = tmp_path / "apex"
    package.mkdir()
    (package / "__init__.py").write_text("# a web toolkit that happens to be called apex\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "apex", raising=False)
    deps._import.cache_clear()
    try:
        with pytest.raises(KnobUnavailable, match="not NVIDIA apex"):
            deps.nvidia_apex_optimizers()
    finally:
        deps._import.cache_clear()


def test_cuda_trial_runtime_turns_on_tf32_and_leaves_cudnn_benchmark_to_the_trial(monkeypatch):
    monkeypatch.setattr(probes, "compute_capability", lambda device: (8, 0))
    before = torch.backends.cudnn.benchmark
    with trial_runtime(FAKE_GPU) as settings:
        assert settings["tf32"] is True and "cudnn_benchmark" not in settings
        assert torch.backends.cudnn.benchmark == before
    with trial_runtime(CPU) as settings:
        assert settings["tf32"] is False
        assert settings["cpu_allocator"] == allocator.keep_freed_memory()  # the record names what ran


def test_verdicts_are_shared_by_gpus_of_one_model_and_not_across_models(monkeypatch):
    """A verdict is keyed by the GPU's model, not its index: two H100s share one, an A100 does not."""
    from conftest import toy_config

    from hpo.verify.stored import verdict_key

    names = {0: "NVIDIA H100 80GB HBM3", 1: "NVIDIA H100 80GB HBM3", 2: "NVIDIA A100-SXM4-80GB"}
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: names[torch.device(device).index])
    config = toy_config()
    h100, other_h100, a100 = (verdict_key(config, torch.device("cuda", i)) for i in names)
    assert h100 == other_h100
    assert a100[0] != h100[0] and a100[1]["device"] == "NVIDIA A100-SXM4-80GB"


def test_doctor_lists_samplers_and_pruners_and_why_one_cannot_run(monkeypatch):
    from hpo.study import _samplers as samplers

    monkeypatch.setattr(samplers, "is_installed", lambda module: module != "cmaes")
    report = doctor.capability_report(torch.device("cpu"))
    assert set(report["sampler"]) == {"tpe", "random", "nsga2", "cmaes", "gp"}
    assert report["sampler"]["cmaes"] == {"usable": False, "why": "needs cmaes: pip install cmaes"}
    assert report["sampler"]["tpe"]["usable"] and set(report["pruner"]) == {"none", "median", "hyperband", "successive_halving"}
    text = doctor.format_report(report)
    assert "cmaes               no   needs cmaes: pip install cmaes" in text
    assert report["peak_tflops"]["fp32"]["tflops"] > 0 and report["peak_tflops"]["fp32"]["source"].startswith("measured")
