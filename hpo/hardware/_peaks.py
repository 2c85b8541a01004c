"""Peak dense matmul throughput of a device, per precision: the denominator of MFU.

GPUs: the vendor's published dense (no 2:4 sparsity) tensor-core peaks, with the datasheet they
come from. fp32 on CUDA runs as TF32 here (hpo enables it for CUDA trials), so its peak is TF32's.
CPUs publish no such figure that torch reaches, so hpo measures one with the kernels a trial runs:
fp32 Linear and matmul calls on fp32 tensors, under `torch.autocast("cpu", dtype)` for bf16 and fp16
(a raw fp16 `torch.mm` on a CPU without native fp16 takes another, slower path than the autocast
Linear a trial runs). A figure is the best of timed repeats, and the cached one the best of
`QUIET_MEASUREMENTS` measurements taken at different times (the first trials on a machine each take
one), so one measurement under load does not stick; a trial that exceeds it has it measured again
(`utilization`). The cache is per machine (CPU model, thread count, torch version) in the user's
cache folder. Every figure carries where it came from, and trials record that source beside their MFU.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
import torch.nn.functional as F

from hpo.files import write_atomic
from hpo.hardware.probes import cpu_model
from hpo.knobs.registry import PRECISION_SPECS

__all__ = ["GPU_PEAKS", "Peak", "measure_cpu_peak", "peak_for", "utilization"]

METHOD = "autocast-linear-matmul"
QUIET_MEASUREMENTS = 3  # measurements, at different times, before a cached CPU figure is trusted
REPEATS = 5  # timed products at the largest size, at least, in each measurement
MIN_SIZE, MAX_SIZE = 512, 2048


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


def utilization(
    achieved_tflops: float, device: torch.device, precision: str, device_name: str
) -> tuple[float | None, Peak | None]:
    """MFU and the peak it is a fraction of. A CPU trial faster than the cached peak has the peak
    measured again (the cached one was too low); if it is still faster, MFU is recorded as 1 and the
    peak's source says so, as it does for a GPU faster than its datasheet (a FLOP count too high)."""
    peak = peak_for(device, precision, device_name)
    if peak is None or not math.isfinite(achieved_tflops):
        return None, peak
    if achieved_tflops > peak.tflops and device.type == "cpu":
        peak = measure_cpu_peak(precision, refresh=True)
    if achieved_tflops <= peak.tflops:
        return achieved_tflops / peak.tflops, peak
    again = " after measuring it again" if device.type == "cpu" else ""
    note = f"; MFU clamped to 1: the trial's {achieved_tflops:.4g} TFLOP/s exceeded this peak{again}"
    return 1.0, Peak(peak.tflops, peak.source + note)


def _cache_file() -> Path:
    root = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(root) / "hpo" / "cpu-peaks.json"


def _machine_key(precision: str) -> str:
    # The method is in the key: a figure timed another way (a raw matmul in the dtype) is not reused.
    return f"{cpu_model()}|threads={torch.get_num_threads()}|torch={torch.__version__}|{precision}|{METHOD}"


def measure_cpu_peak(precision: str, *, seconds: float = 0.5, refresh: bool = False) -> Peak:
    """The best figure measured for `precision` on this CPU so far. A cached figure is used once it
    is the best of `QUIET_MEASUREMENTS` measurements; until then, and with `refresh`, one more is
    taken, and the cache keeps the best of all."""
    path, key = _cache_file(), _machine_key(precision)
    cached = _read(path)
    entry = cached.get(key, {})
    if entry.get("measurements", 0) >= QUIET_MEASUREMENTS and not refresh:
        return Peak(entry["tflops"], entry["source"])
    tflops = max(_timed_autocast_tflops(precision, seconds), entry.get("tflops", 0.0))
    count = entry.get("measurements", 0) + 1
    peak = Peak(tflops, f"measured: best of {count} timed autocast Linear/matmul runs on {cpu_model()}")
    cached[key] = {**asdict(peak), "measurements": count}
    _write(path, cached)
    return peak


def _timed_autocast_tflops(precision: str, seconds: float) -> float:
    """Best TFLOP/s of the ops a trial's layers dispatch, in `precision`, within about `seconds`."""
    # Start at MIN_SIZE: smaller products time OpenMP's barriers more than the kernel, and on a loaded
    # host they stopped the growth early (0.0009 TFLOP/s for fp32). Grow while the next size's REPEATS
    # products of each op fit the budget (a product 8 times this one's), so an emulated dtype (fp16
    # on most CPUs, near 0.03 TFLOP/s) stays small; then repeat at that size until the budget is spent.
    size, best, deadline = MIN_SIZE, 0.0, time.perf_counter() + seconds
    while True:
        elapsed = _shortest_product(precision, size, repeats=1)
        best = max(best, 2 * size**3 / elapsed / 1e12)
        if 8 * elapsed * len(_OPS) * (REPEATS + 1) > seconds or size >= MAX_SIZE:
            break
        size *= 2
    while True:
        best = max(best, 2 * size**3 / _shortest_product(precision, size, repeats=REPEATS) / 1e12)
        if time.perf_counter() >= deadline:
            return best


# The ops a trial's layers reach under autocast: a Linear with a bias (addmm on a transposed
# weight), and a plain matmul (attention's products, a Linear without a bias).
_OPS = (lambda x, weight, bias: F.linear(x, weight, bias), lambda x, weight, bias: torch.matmul(x, weight))


def _shortest_product(precision: str, size: int, repeats: int) -> float:
    """The shortest time of one size x size product among the timed ops, each after an untimed call."""
    dtype = getattr(torch, PRECISION_SPECS[precision].dtype)
    x, weight, bias = torch.randn(size, size), torch.randn(size, size), torch.randn(size)
    region = torch.autocast("cpu", dtype=dtype) if dtype != torch.float32 else contextlib.nullcontext()
    shortest = math.inf
    with torch.no_grad(), region:
        for op in _OPS:
            op(x, weight, bias)  # a first call is not a speed
            for _ in range(repeats):
                start = time.perf_counter()
                op(x, weight, bias)
                shortest = min(shortest, time.perf_counter() - start)
    return shortest


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
