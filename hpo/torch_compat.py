"""Every private torch API hpo uses, in one place (as `hpo.storage._optuna_compat` is for Optuna's).

torch promises nothing about names that start with an underscore: each one below says the torch
versions it was read from (2.13.0, the version CI tests, and 2.14.1, the newest that CI runs a layer
on: scripts/test-torch-newest) and what to do when it changes or disappears. Where the two differ,
the function says what each version needs. Nothing else in hpo touches a private torch attribute (a
test scans the package). The module is imported only by modules that already import torch, except
for `preloaded_torch_modules`: importing this module does not import torch (the study's worker
reads that list and never imports torch), so each function imports it.
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.metadata
import re
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch

__all__ = [
    "cpu_has_native_bf16",
    "COMPILE_PROFILER_RANGES",
    "compile_cache_key_tag",
    "cpu_has_native_fp16",
    "dynamo_backend",
    "fail_on_recompile_limit",
    "foreach_div",
    "foreach_norm",
    "foreach_sub",
    "found_inf_per_device",
    "install_scheduler_tracked_step",
    "scale_on_device",
    "unscales_in_its_step",
    "in_backward_pass",
    "tensor_version",
    "inductor_backend",
    "mark_dynamic_width",
    "preloaded_torch_modules",
    "normalizes_over_the_batch",
    "rounding_mode",
    "is_compiled_wrapper",
]


def preloaded_torch_modules() -> tuple[str, ...]:
    """Submodules torch imports lazily in every trial process, which the forkserver imports once
    instead: torch._dynamo (the optimizers and the profiler import it; torch 2.13.0 and 2.14.1) and,
    before torch 2.14, the CUPTI monitor, which torch 2.13.0's `record_function` imports on its first
    call (`_maybe_cupti_monitor` in torch/autograd/profiler.py). torch 2.14.1 moved that module to
    `torch.profiler._cupti.monitor` and no longer imports it from `record_function`, so there is
    nothing of it to preload; torch 2.11 (the lent GPU machines' torch) has no such module at all, and
    its preload made every `hpo train` there exit 70. The version is read from torch's metadata, which
    imports no torch. If a name is gone in another torch, drop it for that version: preloading only
    saves start-up time."""
    lazy = ("torch._dynamo",)
    return (*lazy, "torch.profiler._cupti_monitor") if (2, 13) <= _torch_release() < (2, 14) else lazy


def _torch_release() -> tuple[int, int]:
    """The installed torch's (major, minor), from its package metadata ("2.14.1+cu130": (2, 14));
    a torch installed without metadata counts as the newest this module knows."""
    try:
        found = re.match(r"(\d+)\.(\d+)", importlib.metadata.version("torch"))
    except importlib.metadata.PackageNotFoundError:
        found = None
    return (int(found[1]), int(found[2])) if found else (2, 14)


def __getattr__(name: str) -> Any:
    """`TorchDispatchMode` (torch/utils/_python_dispatch.py, torch 2.13.0): the base of the
    dispatcher hook the evidence records dtypes with, imported on first use. If it moves, look for
    its new home in torch's `__torch_dispatch__` docs; without it the dtype evidence cannot be
    observed at all."""
    if name == "TorchDispatchMode":
        return importlib.import_module("torch.utils._python_dispatch").TorchDispatchMode
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def cpu_has_native_bf16() -> bool:
    """Whether this CPU computes bf16 natively (avx512_bf16 or AMX). torch 2.13.0:
    `torch.cpu._is_avx512_bf16_supported` and `_is_amx_tile_supported`. If they disappear, read the
    flags from /proc/cpuinfo (`avx512_bf16`, `amx_tile`) instead."""
    import torch

    return torch.cpu._is_avx512_bf16_supported() or torch.cpu._is_amx_tile_supported()


def cpu_has_native_fp16() -> bool:
    """Whether oneDNN runs fp16 natively on this CPU (avx512_fp16 or AMX-FP16). torch 2.13.0:
    `torch.ops.mkldnn._is_mkldnn_fp16_supported`. If it disappears, read `avx512_fp16`/`amx_fp16`
    from /proc/cpuinfo."""
    import torch

    return torch.ops.mkldnn._is_mkldnn_fp16_supported()


def in_backward_pass() -> bool:
    """Whether autograd is running a backward pass right now (a checkpointed block recomputing).
    torch 2.13.0: `torch._C._current_graph_task_id()` is -1 outside backward. If it disappears, count
    recomputation with a `torch.autograd.graph.saved_tensors_hooks` unpack hook instead."""
    import torch

    return torch._C._current_graph_task_id() != -1


def tensor_version(tensor: torch.Tensor) -> int:
    """How many times `tensor` has been written in place (autograd's version counter), read on the
    host with no device sync. torch 2.13.0: `Tensor._version`. If it disappears, snapshot every
    buffer of a checkpointed block before its recomputation instead of only those its forward wrote."""
    return tensor._version


def inductor_backend(mode: str):
    """The backend `torch.compile(mode=mode)` builds, so the mode's inductor options apply. torch
    2.13.0: `torch._TorchCompileInductorWrapper(mode, options, dynamic)`. If it disappears, call
    `torch.compile(model, mode=mode)` and give up wrapping the inductor backend."""
    import torch

    return torch._TorchCompileInductorWrapper(mode, None, False)


# The profiler ranges torch opens around compilation (torch 2.13.0, `dynamo_timed` in
# torch/_dynamo/utils.py names each "<key> (dynamo_timed)"): Dynamo's frame compile, which holds its
# fake-tensor trace, AOTAutograd's and Inductor's; and the lazy backward compile, run inside the first
# backward. Ops recorded inside them were traced, not executed. If the names change, a compiled
# step's evidence counts trace-time ops again (tests/evidence/test_trace_time_ops.py fails): read
# `dynamo_timed` and the calls of it in convert_frame.py and _aot_autograd/runtime_wrappers.py.
COMPILE_PROFILER_RANGES = ("_compile.compile_inner (dynamo_timed)", "backward._backward_impl (dynamo_timed)")


def compile_cache_key_tag(tag: str) -> contextlib.AbstractContextManager:
    """A context in which every torch.compile cache key (AOTAutograd's, the FX graph cache's, PGO's)
    includes `tag`, after any tag the user set (TORCH_COMPILE_CACHE_KEY_TAG). torch 2.13.0:
    `torch.compiler.config.cache_key_tag` ("a common use case for such a tag is to break caches"),
    read when each key is computed; public but not in that module's `__all__`. If it disappears, give
    each knob combination its own TORCHINDUCTOR_CACHE_DIR instead, set before its first compile."""
    import torch

    user = torch.compiler.config.cache_key_tag
    return torch.compiler.config.patch(cache_key_tag=f"{user}|{tag}" if user else tag)


def dynamo_backend(name: str):
    """A compile backend by name. torch 2.13.0: `torch._dynamo.lookup_backend`. If it disappears,
    pass the name to `torch.compile(backend=name)` directly."""
    import torch

    return torch._dynamo.lookup_backend(name)


def reset_compiled_graphs() -> None:
    """Forget every compiled graph in this process, so the next compile starts fresh. torch 2.13.0:
    `torch._dynamo.reset()`. If it disappears, run each compiled combination in its own process."""
    import torch

    torch._dynamo.reset()


def fail_on_recompile_limit(limit: int) -> contextlib.AbstractContextManager:
    """A context in which Dynamo raises past `limit` recompiles instead of quietly running the frame
    uncompiled. torch 2.13.0: `torch._dynamo.config.patch(fail_on_recompile_limit_hit=...,
    recompile_limit=...)`. If the option is renamed, look in torch/_dynamo/config.py; without it a
    compiled trial may fall back to eager unseen."""
    import torch

    return torch._dynamo.config.patch(fail_on_recompile_limit_hit=True, recompile_limit=limit)


def mark_dynamic_width(tensor: torch.Tensor, dim: int = 1) -> None:
    """Tell a compiled model that `dim` varies between calls, so one graph serves every width.
    torch 2.13.0: `torch._dynamo.maybe_mark_dynamic`. If it disappears, drop the call: each width
    then compiles a graph of its own (slower first steps, the same results)."""
    import torch

    torch._dynamo.maybe_mark_dynamic(tensor, dim)


def foreach_norm(tensors: list[torch.Tensor]) -> list[torch.Tensor]:
    """Each tensor's L2 norm, in one fused call. torch 2.13.0: `torch._foreach_norm`. If it
    disappears, use `[torch.linalg.vector_norm(t) for t in tensors]` (slower on many tensors)."""
    import torch

    return torch._foreach_norm(tensors)


def foreach_sub(left: list[torch.Tensor], right: list[torch.Tensor]) -> list[torch.Tensor]:
    """Elementwise `left[i] - right[i]`, in one fused call. torch 2.13.0: `torch._foreach_sub`. If
    it disappears, use a list comprehension."""
    import torch

    return torch._foreach_sub(left, right)


def foreach_div(tensors: list[torch.Tensor], divisor: float | torch.Tensor) -> list[torch.Tensor]:
    """Each tensor divided by `divisor`, in one fused call. torch 2.13.0: `torch._foreach_div`. If
    it disappears, use a list comprehension."""
    import torch

    return torch._foreach_div(tensors, divisor)


def scale_on_device(scaler) -> torch.Tensor | None:
    """A GradScaler's scale as the device tensor it keeps, read without a host sync (None before its
    first `scale()`). torch 2.13.0: `GradScaler._get_scale_async()` (GradScaler.step reads it to hand
    to fused kernels). If it disappears, use `scaler.get_scale()`, which costs one more host sync
    per check boundary."""
    return scaler._get_scale_async()


def found_inf_per_device(scaler, optimizer) -> dict:
    """The inf/NaN flags `GradScaler.unscale_(optimizer)` recorded, one device tensor per device.
    torch 2.13.0: `GradScaler._found_inf_per_device(optimizer)`. If it disappears, check the
    unscaled gradients with `torch.isfinite` instead (one more pass over them)."""
    return scaler._found_inf_per_device(optimizer)


def unscales_in_its_step(optimizer) -> bool:
    """Whether the optimizer's own step unscales the gradients (fused optimizers), so GradScaler.step
    must hand it the scale. torch 2.13.0: the `_step_supports_amp_scaling` attribute GradScaler.step
    reads. If it is renamed, read GradScaler.step (torch/amp/grad_scaler.py) for the new name."""
    return getattr(optimizer, "_step_supports_amp_scaling", False)


def install_scheduler_tracked_step(optimizer, step) -> None:
    """Make `step` the optimizer's step, marked as torch's LR schedulers mark their own wrapper, and
    have it record each call as that wrapper does (else schedulers warn that they stepped before
    the optimizer). torch 2.13.0 (torch/optim/lr_scheduler.py, `patch_track_step_called`): the
    wrapper carries `_wrapped_by_lr_sched` and sets `optimizer._opt_called`. If they are renamed,
    read that function for the new names."""

    def tracked(*args, **kwargs):
        optimizer._opt_called = True
        return step(*args, **kwargs)

    tracked._wrapped_by_lr_sched = True
    optimizer.step = tracked


def normalizes_over_the_batch(module: torch.nn.Module) -> bool:
    """Whether `module` normalises by its batch's statistics in train mode: every BatchNorm
    (1d/2d/3d, lazy and SyncBatchNorm) derives from `torch.nn.modules.batchnorm._BatchNorm` (torch
    2.13.0 and 2.14.1). If the base is renamed, list the public classes instead."""
    import torch

    return isinstance(module, torch.nn.modules.batchnorm._BatchNorm)


def rounding_mode(round_tensor):
    """A dispatch mode inside which every op's floating inputs and outputs pass through
    `round_tensor`, forward and backward: `TorchDispatchMode` and `tree_map` from
    `torch.utils._python_dispatch` and `torch.utils._pytree`, and an op's `_schema.is_mutable`
    (torch 2.13.0 and 2.14.1). Views and in-place ops pass untouched: their outputs alias their
    inputs, and returning a fresh tensor from them breaks autograd's view tracking. If these move,
    torch's own tests of `TorchDispatchMode` show where."""
    from torch.utils._python_dispatch import TorchDispatchMode
    from torch.utils._pytree import tree_map

    class Rounding(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            kwargs = kwargs or {}
            if func.is_view or func._schema.is_mutable:
                return func(*args, **kwargs)
            args, kwargs = tree_map(round_tensor, args), tree_map(round_tensor, kwargs)
            return tree_map(round_tensor, func(*args, **kwargs))

    return Rounding()


def is_compiled_wrapper(model: object) -> bool:
    """Whether `model` is torch.compile's wrapper around a module: `torch._dynamo.eval_frame.
    OptimizedModule` (torch 2.13.0 and 2.14.1). If it moves, Lightning's `from_compiled` imports it
    from wherever torch keeps it."""
    from torch._dynamo.eval_frame import OptimizedModule

    return isinstance(model, OptimizedModule)
