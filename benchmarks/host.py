"""The CPU a benchmark ran on: its model and the flags that decide bf16 speed (avx512_bf16, AMX),
and the host kind those flags name, which is part of every result file's name.

Committed with every benchmark result, because the same command ranks precisions differently on an
AVX2-only host (bf16 emulated) and on one with avx512_bf16 or AMX (see ../shared/FINDINGS.md).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

__all__ = ["CPU_FLAGS", "cpu_info", "gpu_info", "host_kind"]

CPU_FLAGS = ("avx512_bf16", "amx_bf16", "amx_tile", "avx512f", "avx2")
# The CPU kinds, fastest bf16 first: a host is the first whose flag it has.
CPU_KINDS = (("amx_bf16", "cpu-amx"), ("avx512_bf16", "cpu-avx512bf16"), ("avx512f", "cpu-avx512"), ("avx2", "cpu-avx2"))


def cpu_info() -> dict:
    model, flags = "unknown", set()
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.exists():
        for line in cpuinfo.read_text().splitlines():
            key, _, value = line.partition(":")
            if key.strip() == "model name" and model == "unknown":
                model = value.strip()
            elif key.strip() == "flags" and not flags:
                flags = set(value.split())
    return {
        "cpu_model": model,
        "cpu_flags": {flag: flag in flags for flag in CPU_FLAGS},
        "cpu_count": os.cpu_count(),
        "cpus_usable": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count(),
    }


def host_kind(cpu_flags: dict[str, bool], cuda_device: str | None = None) -> str:
    """`cuda-<device>` for a run on a GPU, else the CPU kind its flags name (`cpu-avx512bf16`,
    `cpu-avx2`, ...): results measured on different kinds are kept apart, one file per kind."""
    if cuda_device is not None:
        return "cuda-" + re.sub(r"[^a-z0-9]+", "-", cuda_device.lower()).strip("-")
    return next((kind for flag, kind in CPU_KINDS if cpu_flags.get(flag)), "cpu")


def gpu_info() -> dict:
    """The GPU as nvidia-smi names it, with its driver and memory ({} without nvidia-smi): a GPU
    result records the driver beside torch's own versions."""
    if shutil.which("nvidia-smi") is None:
        return {}
    query = "--query-gpu=name,driver_version,memory.total"
    try:
        proc = subprocess.run(["nvidia-smi", query, "--format=csv,noheader"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return {}
    fields = [f.strip() for f in proc.stdout.splitlines()[0].split(",")] if proc.returncode == 0 and proc.stdout else []
    return dict(zip(("gpu_name", "gpu_driver", "gpu_memory"), fields)) if len(fields) == 3 else {}
