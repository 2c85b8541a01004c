"""Peak dense matmul throughput of a device, per precision: the denominator of MFU.

GPUs: the vendor's published dense (no 2:4 sparsity) tensor-core peaks, with the datasheet they
come from. fp32 on CUDA runs as TF32 here (hpo enables it for CUDA trials), so its peak is TF32's.
CPUs publish no such figure that torch reaches, so hpo measures one: a timed square matmul per
dtype, cached per machine (CPU model, thread count, torch version) in the user's cache folder.
Every figure carries where it came from, and trials record that source beside their MFU.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import torch

from hpo.files import write_atomic
from hpo.hardware.probes import cpu_model

__all__ = ["GPU_PEAKS", "Peak", "measure_cpu_peak", "peak_for"]

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}


@dataclass(frozen=True)
class Peak:
    tflops: float
    source: str


# Dense tensor-core TFLOP/s by precision (fp32 is TF32, except on V100, which has no TF32).
_H100_SXM = "NVIDIA H100 Tensor Core GPU datasheet (SXM5, dense)"
_H100_PCIE = "NVIDIA H100 Tensor Core GPU datasheet (PCIe, dense)"
_H200 = "NVIDIA H200 Tensor Core GPU datasheet (SXM, dense)"
_A100 = "NVIDIA A100 Tensor Core GPU datasheet (SXM and PCIe, 40 and 80 GB, dense)"
_L4 = "NVIDIA L4 Tensor Core GPU datasheet (dense)"
_L40 = "NVIDIA L40 GPU datasheet (dense)"
_L40S = "NVIDIA L40S GPU datasheet (dense)"
_V100 = "NVIDIA V100 Tensor Core GPU datasheet (SXM2)"


def _peaks(source: str, **tflops: float) -> dict[str, Peak]:
    return {precision: Peak(value, source) for precision, value in tflops.items()}


H100_SXM = _peaks(_H100_SXM, bf16=989.4, fp16=989.4, fp32=494.7)
H100_PCIE = _peaks(_H100_PCIE, bf16=756.0, fp16=756.0, fp32=378.0)
H200 = _peaks(_H200, bf16=989.4, fp16=989.4, fp32=494.7)
A100 = _peaks(_A100, bf16=312.0, fp16=312.0, fp32=156.0)
L4 = _peaks(_L4, bf16=121.0, fp16=121.0, fp32=60.0)
L40 = _peaks(_L40, bf16=181.05, fp16=181.05, fp32=90.5)
L40S = _peaks(_L40S, bf16=362.05, fp16=362.05, fp32=183.0)
V100_SXM2 = _peaks(_V100, fp16=125.0, fp32=15.7)  # no bf16 units, no TF32: fp32 is CUDA-core fp32

# Keyed on the exact name `torch.cuda.get_device_name` (and `nvidia-smi --query-gpu=name`) prints:
# substrings confuse "NVIDIA L40S" with "NVIDIA L4" and "NVIDIA RTX A1000" with A100. A name not
# here has no peak and its trials record no MFU: H100 NVL, GH200, A10, T4 and others until a
# datasheet figure is added, and every MIG slice ("NVIDIA A100-SXM4-40GB MIG 1g.5gb"), whose
# share of the GPU's tensor cores its name does not prove.
GPU_PEAKS: dict[str, dict[str, Peak]] = {
    "NVIDIA H100 80GB HBM3": H100_SXM,
    "NVIDIA H100 PCIe": H100_PCIE,
    "NVIDIA H200": H200,
    "NVIDIA A100-SXM4-40GB": A100,
    "NVIDIA A100-SXM4-80GB": A100,
    "NVIDIA A100-PCIE-40GB": A100,
    "NVIDIA A100 80GB PCIe": A100,
    "NVIDIA L4": L4,
    "NVIDIA L40": L40,
    "NVIDIA L40S": L40S,
    "Tesla V100-SXM2-16GB": V100_SXM2,
    "Tesla V100-SXM2-32GB": V100_SXM2,
}


def peak_for(device: torch.device, precision: str, device_name: str) -> Peak | None:
    """The peak for this device and precision, or None when hpo knows none (the trial then
    records no MFU rather than a made-up one). GPUs are matched on their exact name."""
    if device.type == "cuda":
        return GPU_PEAKS.get(device_name.strip(), {}).get(precision)
    if device.type == "cpu":
        return measure_cpu_peak(precision)
    return None


def _cache_file() -> Path:
    root = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(root) / "hpo" / "cpu-peaks.json"


def _machine_key(precision: str) -> str:
    return f"{cpu_model()}|threads={torch.get_num_threads()}|torch={torch.__version__}|{precision}"


def measure_cpu_peak(precision: str, *, seconds: float = 0.3, refresh: bool = False) -> Peak:
    """Best of timed square matmuls in `precision` on this CPU, cached per machine."""
    path, key = _cache_file(), _machine_key(precision)
    cached = _read(path)
    if key in cached and not refresh:
        return Peak(**cached[key])
    peak = Peak(_timed_matmul_tflops(DTYPES[precision], seconds), f"measured: timed matmul on {cpu_model()}")
    cached[key] = asdict(peak)
    _write(path, cached)
    return peak


def _timed_matmul_tflops(dtype: torch.dtype, seconds: float) -> float:
    # Start small: an emulated dtype (fp16 on most CPUs) runs near 1 GFLOP/s, and a 1024^3
    # matmul would take seconds. Grow while one product takes under a tenth of the budget.
    size, best, deadline = 128, 0.0, time.perf_counter() + seconds
    while time.perf_counter() < deadline:
        a = torch.randn(size, size).to(dtype)
        start = time.perf_counter()
        torch.mm(a, a)
        elapsed = time.perf_counter() - start
        best = max(best, 2 * size**3 / elapsed / 1e12)
        if elapsed < seconds / 10 and size < 2048:
            size *= 2
    return best


def _read(path: Path) -> dict:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return {}


def _write(path: Path, data: dict) -> None:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(path, json.dumps(data, indent=1, sort_keys=True))  # concurrent workers: last writer wins, whole
    except OSError:
        pass  # a read-only home: the figure is measured again next time, which is still right
