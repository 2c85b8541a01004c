"""Peaks for MFU: published GPU figures by device name, a measured and cached CPU figure."""

from __future__ import annotations

import pytest
import torch

from hpo.config.trial import Knobs
from hpo.hardware import peaks

GPU = torch.device("cuda", 0)

# Names as `torch.cuda.get_device_name` and `nvidia-smi --query-gpu=name` print them, with the dense
# bf16 (fp16 for V100) peak hpo must give, or None where no datasheet figure is in the table.
NAMES = [
    ("NVIDIA H100 80GB HBM3", "bf16", 989.4),  # H100 SXM5
    ("NVIDIA H100 PCIe", "bf16", 756.0),
    ("NVIDIA H100 NVL", "bf16", None),  # never the SXM figure
    ("NVIDIA H200", "bf16", 989.4),
    ("NVIDIA H200 NVL", "bf16", None),
    ("NVIDIA GH200 480GB", "bf16", None),
    ("NVIDIA A100-SXM4-40GB", "bf16", 312.0),
    ("NVIDIA A100-SXM4-80GB", "bf16", 312.0),
    ("NVIDIA A100-PCIE-40GB", "bf16", 312.0),
    ("NVIDIA A100 80GB PCIe", "bf16", 312.0),
    ("NVIDIA L4", "bf16", 121.0),
    ("NVIDIA L40", "bf16", 181.05),
    ("NVIDIA L40S", "bf16", 362.05),  # never L4's 121
    ("NVIDIA A10", "bf16", None),
    ("NVIDIA RTX A1000", "bf16", None),  # never A100's 312
    ("NVIDIA RTX A1000 6GB Laptop GPU", "bf16", None),
    ("Tesla V100-SXM2-16GB", "fp16", 125.0),
    ("Tesla V100-SXM2-16GB", "bf16", None),  # no bf16 units
    ("Tesla T4", "fp16", None),
    ("NVIDIA A100-SXM4-40GB MIG 1g.5gb", "bf16", None),  # a MIG slice: not the whole GPU's peak
    ("NVIDIA H100 80GB HBM3 MIG 3g.40gb", "bf16", None),
    ("NVIDIA GeForce GTX 1080", "bf16", None),
]


@pytest.mark.parametrize("name,precision,tflops", NAMES)
def test_gpu_peak_is_matched_on_the_exact_device_name(name, precision, tflops):
    peak = peaks.peak_for(GPU, precision, name)
    if tflops is None:
        assert peak is None
    else:
        assert peak.tflops == tflops and "datasheet" in peak.source


def test_at_least_fifteen_real_names_are_checked_and_similar_names_never_borrow_a_peak():
    assert len({name for name, _, _ in NAMES}) >= 15
    assert peaks.peak_for(GPU, "bf16", "NVIDIA L40S").tflops != peaks.peak_for(GPU, "bf16", "NVIDIA L4").tflops
    assert peaks.peak_for(GPU, "fp32", "NVIDIA H200").tflops == 494.7  # fp32 is TF32's dense figure


@pytest.mark.parametrize("name,mfu_known", [("NVIDIA L40S", True), ("NVIDIA A100-SXM4-40GB MIG 1g.5gb", False)])
def test_a_trial_on_an_unknown_gpu_records_mfu_null(monkeypatch, name, mfu_known):
    from conftest import toy_config

    from hpo.trial import speed
    from hpo.trial.trainer import TrainResult

    config = toy_config(Knobs(precision="bf16", attention="eager", optimizer="forloop"))
    monkeypatch.setattr(speed, "_flops_per_sample", lambda *args: 1e9)
    monkeypatch.setattr(speed, "device_model", lambda device: name)
    result = TrainResult(
        metrics={}, knobs_observed={}, step_time_ms=1.0, train_samples_per_s=1e4, peak_mem_mb=1, n_params=1, steps=1
    )
    attrs = speed.speed_attrs(None, config, GPU, result, None)
    assert (attrs["mfu"] is not None) is mfu_known
    if not mfu_known:
        assert attrs["peak_tflops"] is None and attrs["peak_source"] is None


def test_cpu_peak_is_measured_once_then_read_from_the_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    first = peaks.peak_for(torch.device("cpu"), "fp32", "cpu")
    assert first.tflops > 0 and first.source.startswith("measured")
    assert (tmp_path / "hpo" / "cpu-peaks.json").is_file()

    def must_not_run(*args):
        raise AssertionError("the cached figure should have been used")

    monkeypatch.setattr(peaks, "_timed_matmul_tflops", must_not_run)
    assert peaks.peak_for(torch.device("cpu"), "fp32", "cpu") == first
