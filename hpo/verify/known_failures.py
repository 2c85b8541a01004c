"""Interim: replaced by the upstream failure contracts (issue 22)."""

from __future__ import annotations

_STICKY = ("CUDA error:", "CUBLAS_STATUS_ALLOC_FAILED", "CUBLAS_STATUS_EXECUTION_FAILED")


def is_sticky_device_error(exc: BaseException) -> bool:
    return any(marker in str(exc) for marker in _STICKY)
