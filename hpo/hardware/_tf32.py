"""TF32 for a CUDA trial's fp32 matmuls and cuDNN convolutions, set and restored through the API
this torch has.

torch >= 2.9 sets TF32 per backend and operator through `fp32_precision` ("tf32", "ieee"; "none"
inherits): `torch.backends.cuda.matmul`, `torch.backends.cudnn.conv`, `torch.backends.cudnn.rnn`.
Older torch has only the `allow_tf32` flags, used here only when `fp32_precision` is absent.

torch keeps a legacy view beside the new one (a matmul-precision enum, a cuDNN flag) and raises
"... mix of the legacy and new APIs ..." when a legacy *getter* is read while the views disagree
(`aten/src/ATen/Context.cpp`: `allowTF32CuBLAS`, `float32MatmulPrecision`). They disagree as soon
as anything writes `fp32_precision` alone, as transformers does. So hpo reads a legacy getter
only inside a `try`, and never writes `allow_tf32` where `fp32_precision` exists. Yet Lightning 2.6
(`_check_cuda_matmul_precision`, on every Ampere+ Trainer) and inductor's autotuner still call
`torch.get_float32_matmul_precision()`; so that they keep working, hpo also moves the matmul enum
with `torch.set_float32_matmul_precision`, the one setter that writes both views at once, and then
writes every value it means through `fp32_precision`.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch

__all__ = ["enabled", "has_fp32_precision", "state"]

# The (module path, attribute) of each `fp32_precision` hpo sets for a CUDA trial.
_TF32_SITES = ("cuda.matmul", "cudnn.conv", "cudnn.rnn")
# Written as a side effect of `torch.set_float32_matmul_precision`; put back so CPU matmuls in a
# CUDA trial are untouched.
_SIDE_SITES = ("mkldnn.matmul",)


def _site(path: str):
    obj = torch.backends
    for part in path.split("."):
        obj = getattr(obj, part)
    return obj


def has_fp32_precision() -> bool:
    """Whether this torch has the per-backend `fp32_precision` API (torch >= 2.9)."""
    try:
        for path in _TF32_SITES:
            _site(path).fp32_precision  # noqa: B018 - the read is the test
    except AttributeError:
        return False
    return True


def state() -> dict[str, str]:
    """The effective `fp32_precision` of each site hpo touches (new API only: never raises)."""
    return {path: _site(path).fp32_precision for path in _TF32_SITES + _SIDE_SITES}


def _matmul_enum() -> str | None:
    """torch's legacy matmul precision, or None when the views already disagree (torch raises)."""
    try:
        return torch.get_float32_matmul_precision()
    except RuntimeError:
        return None


def _write(values: dict[str, str]) -> None:
    for path, value in values.items():
        _site(path).fp32_precision = value


@contextlib.contextmanager
def enabled() -> Iterator[None]:
    """TF32 on for CUDA matmuls and cuDNN inside the block; the previous state after it."""
    if not has_fp32_precision():
        with _legacy_enabled():
            yield
        return
    saved, enum = state(), _matmul_enum()
    torch.set_float32_matmul_precision("high")  # the legacy view, for Lightning's and inductor's reads
    _write({path: "tf32" for path in _TF32_SITES})
    _write({path: saved[path] for path in _SIDE_SITES})
    try:
        yield
    finally:
        # A view that disagreed before is left agreeing with the restored new-API values.
        torch.set_float32_matmul_precision(enum or ("high" if saved["cuda.matmul"] == "tf32" else "highest"))
        _write(saved)


@contextlib.contextmanager
def _legacy_enabled() -> Iterator[None]:
    """torch < 2.9: only `allow_tf32` exists, so no mix of APIs can arise."""
    matmul, cudnn = torch.backends.cuda.matmul, torch.backends.cudnn
    saved = (matmul.allow_tf32, cudnn.allow_tf32)
    matmul.allow_tf32 = cudnn.allow_tf32 = True
    try:
        yield
    finally:
        matmul.allow_tf32, cudnn.allow_tf32 = saved
