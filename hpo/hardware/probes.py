"""Pure capability probes: each one answers a question about this machine by trying it.

Tests monkeypatch these functions to exercise CUDA branches on a CPU-only machine; nothing else in
hpo asks torch about hardware directly.
"""

from __future__ import annotations

import functools
import inspect
import platform
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from hpo.torch_compat import cpu_has_native_bf16, cpu_has_native_fp16


@dataclass(frozen=True)
class Capability:
    usable: bool
    why: str = ""


def cuda_available() -> bool:
    return torch.cuda.is_available()


def compute_capability(device: torch.device) -> tuple[int, int] | None:
    return torch.cuda.get_device_capability(device) if device.type == "cuda" else None


@functools.cache
def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def device_model(device: torch.device) -> str:
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    return f"cpu: {cpu_model()}"


def cuda_bf16_native() -> bool:
    """bf16 in hardware, not emulated: `torch.cuda.is_bf16_supported()` counts emulation by default
    (True on V100 and T4, where bf16 runs as slow fp32 math), so ask without it where torch can."""
    check = torch.cuda.is_bf16_supported
    if "including_emulation" in inspect.signature(check).parameters:
        return check(including_emulation=False)
    return check()  # older torch: no emulation counted


def bf16_supported(device: torch.device) -> Capability:
    if device.type == "cuda":
        ok = cuda_bf16_native()
        return Capability(ok, "" if ok else f"compute capability {compute_capability(device)} < 8.0: bf16 only emulated")
    native = cpu_has_native_bf16()
    return Capability(True, "native avx512_bf16/AMX" if native else "emulated: no avx512_bf16/AMX, slow")


def fp16_supported(device: torch.device) -> Capability:
    if device.type == "cuda":
        return Capability(True, "")
    native = cpu_has_native_fp16()
    return Capability(True, "native" if native else "emulated: no avx512_fp16/AMX-FP16, expect 20-40x slower")


def tf32_supported(device: torch.device) -> Capability:
    cc = compute_capability(device)
    if cc is None:
        return Capability(False, "TF32 is a CUDA tensor-core format")
    return Capability(cc >= (8, 0), "" if cc >= (8, 0) else f"compute capability {cc} < 8.0")


def sdpa_kernel_runs(kernel: str, device: torch.device, dtype: torch.dtype) -> Capability:
    """Run the pinned SDPA kernel forward and backward on a small causal batch."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    q = torch.randn(2, 4, 64, 64, device=device, dtype=dtype, requires_grad=True)
    try:
        with sdpa_kernel([getattr(SDPBackend, kernel)]):
            F.scaled_dot_product_attention(q, q, q, is_causal=True).sum().backward()
    except RuntimeError as exc:
        return Capability(False, str(exc).strip().splitlines()[0][:160])
    return Capability(True)


def sdpa_kernel_usable(kernel: str, device: torch.device) -> Capability:
    """Whether the SDPA kernel runs here, tried in the dtype trials would give it: fp32 on a CPU,
    bf16 on a GPU that has it (several fused kernels take no fp32), else fp32."""
    low = torch.bfloat16 if device.type != "cpu" and bf16_supported(device).usable else torch.float32
    return sdpa_kernel_runs(kernel, device, low)


def flash_attn_arch_supported(device: torch.device) -> Capability:
    cc = compute_capability(device)
    if cc is not None and cc < (8, 0):
        return Capability(False, f"flash-attn 2 needs compute capability >= 8.0, got {cc}")
    return Capability(True)


def fused_adamw_runs(device: torch.device) -> Capability:
    p = torch.nn.Parameter(torch.zeros(4, device=device))
    p.grad = torch.ones_like(p)
    try:
        torch.optim.AdamW([p], fused=True).step()
    except (RuntimeError, TypeError) as exc:
        return Capability(False, str(exc).splitlines()[0][:160])
    return Capability(True)
