"""Peaks for MFU: published GPU figures by device name, a measured and cached CPU figure."""

from __future__ import annotations

import pytest
import torch

from hpo.hardware import peaks


@pytest.mark.parametrize(
    "name,precision,tflops",
    [
        ("NVIDIA H100 80GB HBM3", "bf16", 989.4),
        ("NVIDIA H100 PCIe", "bf16", 756.0),
        ("NVIDIA H200", "fp32", 494.7),
        ("NVIDIA A100-SXM4-40GB", "fp16", 312.0),
    ],
)
def test_gpu_peak_comes_from_the_published_table_with_its_source(name, precision, tflops):
    peak = peaks.peak_for(torch.device("cuda", 0), precision, name)
    assert peak.tflops == tflops and "datasheet" in peak.source


def test_unknown_gpu_or_dtype_has_no_peak_rather_than_a_guess():
    assert peaks.peak_for(torch.device("cuda", 0), "bf16", "NVIDIA GeForce GTX 1080") is None
    assert peaks.peak_for(torch.device("cuda", 0), "bf16", "Tesla V100-SXM2-16GB") is None  # no bf16 units


def test_cpu_peak_is_measured_once_then_read_from_the_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    first = peaks.peak_for(torch.device("cpu"), "fp32", "cpu")
    assert first.tflops > 0 and first.source.startswith("measured")
    assert (tmp_path / "hpo" / "cpu-peaks.json").is_file()

    def must_not_run(*args):
        raise AssertionError("the cached figure should have been used")

    monkeypatch.setattr(peaks, "_timed_matmul_tflops", must_not_run)
    assert peaks.peak_for(torch.device("cpu"), "fp32", "cpu") == first
