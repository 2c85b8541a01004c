"""The CPU a benchmark ran on: its model and the flags that decide bf16 speed (avx512_bf16, AMX).

Committed with every benchmark result, because the same command ranks precisions differently on an
AVX2-only host (bf16 emulated) and on one with avx512_bf16 or AMX (see ../shared/FINDINGS.md).
"""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["CPU_FLAGS", "cpu_info"]

CPU_FLAGS = ("avx512_bf16", "amx_bf16", "amx_tile", "avx512f", "avx2")


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
