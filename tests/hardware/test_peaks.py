"""Peaks for MFU: published GPU figures by device name, a measured and cached CPU figure."""

from __future__ import annotations

import pytest
import torch

from hpo.config.trial import Knobs
from hpo.hardware import _peaks as peaks
from hpo.knobs.registry import PRECISION_SPECS
from hpo.torch_compat import TorchDispatchMode

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

    from hpo.trial import _speed_record as speed

    config = toy_config(Knobs(precision="bf16", attention="eager", optimizer="forloop"))
    monkeypatch.setattr(speed, "_flops_per_sample", lambda *args: 1e9)
    monkeypatch.setattr(speed, "device_model", lambda device: name)
    result = _result(steady_samples_per_s=1e4)
    attrs = speed.speed_attrs(None, config, GPU, result, None)
    assert (attrs["mfu"] is not None) is mfu_known
    if not mfu_known:
        assert attrs["peak_tflops"] is None and attrs["peak_source"] is None


def test_cpu_peak_is_measured_quietly_then_read_from_the_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    for _ in range(peaks.QUIET_MEASUREMENTS):
        first = peaks.peak_for(torch.device("cpu"), "fp32", "cpu")
    assert first.tflops > 0 and first.source.startswith("measured")
    assert (tmp_path / "hpo" / "cpu-peaks.json").is_file()

    def must_not_run(*args):
        raise AssertionError("the cached figure should have been used")

    monkeypatch.setattr(peaks, "_timed_autocast_tflops", must_not_run)
    assert peaks.peak_for(torch.device("cpu"), "fp32", "cpu") == first


CPU = torch.device("cpu")


def _fake_measurements(monkeypatch, tmp_path, figures: list[float]) -> list[str]:
    """Each measurement returns the next figure; returns the list of precisions measured."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    measured, figures = [], iter(figures)

    def fake(precision, seconds):
        measured.append(precision)
        return next(figures)

    monkeypatch.setattr(peaks, "_timed_autocast_tflops", fake)
    return measured


def test_a_cached_figure_is_the_best_of_several_measurements_not_the_first(tmp_path, monkeypatch):
    measured = _fake_measurements(monkeypatch, tmp_path, [0.085, 0.19, 0.15])
    seen = [peaks.peak_for(CPU, "bf16", "cpu").tflops for _ in range(peaks.QUIET_MEASUREMENTS + 2)]
    assert seen == [0.085, 0.19, 0.19, 0.19, 0.19]  # a noisy first figure does not stick
    assert measured == ["bf16"] * peaks.QUIET_MEASUREMENTS


def test_a_trial_faster_than_the_cached_peak_has_it_measured_again(tmp_path, monkeypatch):
    measured = _fake_measurements(monkeypatch, tmp_path, [0.004, 0.004, 0.004, 0.03])
    for _ in range(peaks.QUIET_MEASUREMENTS):
        peaks.peak_for(CPU, "fp16", "cpu")
    mfu, peak = peaks.utilization(0.0064, CPU, "fp16", "cpu")  # the fp16 trial: 153% of a raw fp16 mm
    assert len(measured) == peaks.QUIET_MEASUREMENTS + 1
    assert peak.tflops == 0.03 and mfu == pytest.approx(0.0064 / 0.03) and "clamped" not in peak.source
    assert peaks.peak_for(CPU, "fp16", "cpu").tflops == 0.03  # the new figure is the cached one now


def test_a_recorded_mfu_never_exceeds_one_and_a_clamp_is_said(tmp_path, monkeypatch):
    from conftest import toy_config

    from hpo.trial import _speed_record as speed

    measured = _fake_measurements(monkeypatch, tmp_path, [0.004] * 5)
    monkeypatch.setattr(speed, "_flops_per_sample", lambda *args: 1e9)
    config = toy_config(Knobs(precision="fp16", attention="eager", optimizer="forloop"))
    result = _result(steady_samples_per_s=6.4)
    attrs = speed.speed_attrs(None, config, CPU, result, None)
    assert attrs["achieved_tflops"] == pytest.approx(0.0064) and attrs["mfu"] == 1.0
    assert (
        attrs["peak_tflops"] == 0.004
        and "MFU clamped to 1" in attrs["peak_source"]
        and "measuring it again" in attrs["peak_source"]
    )
    assert measured[-1] == "fp16" and len(measured) == 2  # the first measurement, then one more on exceeding it


def test_a_gpu_trial_faster_than_its_datasheet_is_clamped_and_said():
    mfu, peak = peaks.utilization(1000.0, GPU, "bf16", "NVIDIA L4")
    assert mfu == 1.0 and peak.tflops == 121.0 and "MFU clamped to 1" in peak.source
    assert peaks.utilization(60.5, GPU, "bf16", "NVIDIA L4")[0] == pytest.approx(0.5)


class _MatmulCalls(TorchDispatchMode):
    """Each matmul-class kernel reached: its name, its inputs' dtypes, and whether the second
    matrix is a transposed view (a Linear's weight is)."""

    def __init__(self):
        super().__init__()
        self.calls = set()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name = func.overloadpacket.__name__
        if name in ("mm", "addmm", "matmul", "bmm"):
            tensors = [a for a in args if isinstance(a, torch.Tensor)]
            self.calls.add((name, tuple(str(t.dtype) for t in tensors), not tensors[-1].is_contiguous()))
        return func(*args, **(kwargs or {}))


@pytest.mark.parametrize("precision", ["bf16", "fp16"])
def test_the_cpu_peak_times_the_kernels_autocast_dispatches_for_a_trials_linear(precision):
    dtype = getattr(torch, PRECISION_SPECS[precision].dtype)
    layer = torch.nn.Linear(32, 32)
    with _MatmulCalls() as trial, torch.autocast("cpu", dtype=dtype):
        layer(torch.randn(4, 32))
    with _MatmulCalls() as measured:
        peaks._timed_autocast_tflops(precision, seconds=0.0)
    assert trial.calls and trial.calls <= measured.calls, f"a trial's Linear runs {trial.calls}, the peak timed {measured.calls}"


def _result(steady_samples_per_s: float):
    """A trained trial's result whose steady steps ran at this speed (MFU reads it)."""
    from hpo.trial._trainer import TrainResult

    return TrainResult(
        metrics={}, knobs_observed={}, step_time_ms=1.0, train_samples_per_s=1.0, peak_mem_mb=1, n_params=1, steps=1,
        steady_samples_per_s=steady_samples_per_s,
    )  # fmt: skip
