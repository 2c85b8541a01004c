"""The failures upstream libraries raise when a systems knob cannot run: the one place their
messages live, each entry naming the upstream source it was read from.

`match_known_failure` turns an exception into an `incompatible` verdict implicating exactly the
value at fault, or the (value, precision) pair when a kernel refused the dtype. A failure that is
not listed here is not guessed at: it returns None, and the caller measures a differential run.
`is_sticky_device_error` names the CUDA errors after which the process must not be reused; they
are errors of the trial, never knob verdicts.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from hpo.config.trial import Knobs
from hpo.errors import KnobUnavailable, exception_chain, is_dynamo_wrapper, real_cause
from hpo.verdicts import Kind, Verdict

__all__ = ["KNOWN_FAILURES", "KnownFailure", "is_sticky_device_error", "match_known_failure", "real_cause"]


@dataclass(frozen=True, kw_only=True)
class KnownFailure:
    """One upstream failure: the exception type names that raise it, a case-insensitive regex its
    message matches, the knob it blames, and whether the precision is blamed with it (a kernel that
    refuses the dtype the precision gives it)."""

    name: str
    types: tuple[str, ...]  # exception class names (any class in the exception's MRO)
    pattern: str  # re.search, case-insensitive, on the message
    knob: str
    with_precision: bool = False
    kind: Kind = Kind.INCOMPATIBLE
    source: str  # upstream file and version the message was read from

    def matches(self, exc: BaseException) -> bool:
        names = {cls.__name__ for cls in type(exc).__mro__}
        return bool(names.intersection(self.types)) and re.search(self.pattern, str(exc), re.IGNORECASE) is not None


_RUNTIME = ("RuntimeError",)

KNOWN_FAILURES: tuple[KnownFailure, ...] = (
    # CPU: no dtype check in use_flash_attention_cpp (fp32, bf16, fp16 all run); the pinned kernel
    # (efficient, cuDNN) simply does not exist on this device: the kernel alone is at fault.
    KnownFailure(
        name="sdpa_cpu_no_viable_backend", types=_RUNTIME, knob="attention",
        pattern=r"No viable backend for scaled_dot_product_attention was found",
        source="pytorch aten/src/ATen/native/transformers/sdp_utils_cpp.cpp (torch 2.13)",
    ),
    # CUDA: each kernel's refusal reasons go out as warnings; every kernel checks the input dtype
    # (flash and cuDNN refuse fp32, efficient refuses bf16 below sm80), so the refusal is blamed on
    # the kernel together with the precision: fp32 + sdpa_flash never bans sdpa_flash for bf16.
    KnownFailure(
        name="sdpa_cuda_no_available_kernel", types=_RUNTIME, knob="attention", with_precision=True,
        # One space after "kernel." on CUDA; two on CPU, where the flash kernel refuses an attention
        # mask that needs gradients (T5's learned position bias): the kernel cannot run this model.
        pattern=r"No available kernel\.\s+Aborting execution",
        source="pytorch aten/src/ATen/native/transformers/cuda/sdp_utils.cpp and sdp_utils_cpp.cpp (torch 2.13)",
    ),
    KnownFailure(
        name="flash_attn_dtype", types=_RUNTIME, knob="attention", with_precision=True,
        pattern=r"FlashAttention only supports? fp16 and bf16 data type",
        source="flash-attention csrc/flash_attn/flash_api.cpp (read at v2.7.0 and v2.8.3.post1)",
    ),
    KnownFailure(
        name="flash_attn_arch", types=_RUNTIME, knob="attention",
        pattern=r"FlashAttention only supports Ampere GPUs or newer",
        source="flash-attention csrc/flash_attn/flash_api.cpp (read at v2.7.0 and v2.8.3.post1)",
    ),
    # xformers' dispatcher found no operator for these inputs (device, dtype, bias, head dim).
    KnownFailure(
        name="xformers_no_operator", types=("NotImplementedError",), knob="attention", with_precision=True,
        pattern=r"No operator found for `memory_efficient_attention_(forward|backward)`",
        source="xformers xformers/ops/fmha/dispatch.py (v0.0.35)",
    ),
    # Compiled FlexAttention on CPU is inference-only: training needs the logsumexp it refuses.
    KnownFailure(
        name="flex_attention_cpu_backward", types=("NotImplementedError",), knob="compile",
        pattern=r"torch\.compile on CPU only supports inference",
        source="pytorch torch/_inductor/kernel/flex/flex_cpu.py (torch 2.13)",
    ),
    # Parameters on a device (or of a dtype) with no fused kernel; the autocast precision leaves the
    # parameters alone, so the optimizer value is at fault by itself.
    KnownFailure(
        name="torch_fused_optimizer_device", types=_RUNTIME, knob="optimizer",
        pattern=r"`fused=True` requires all the params to be floating point Tensors of supported devices",
        source="pytorch torch/optim/optimizer.py _device_dtype_check_for_fused (torch 2.13)",
    ),
    KnownFailure(
        name="torch_fused_optimizer_flags", types=_RUNTIME, knob="optimizer",
        pattern=r"`fused` and `foreach` cannot be `True` together|`fused` does not support `differentiable`",
        source="pytorch torch/optim/adam.py Adam.__init__ (torch 2.13)",
    ),
    KnownFailure(
        name="apex_fused_adam_dtype", types=_RUNTIME, knob="optimizer",
        pattern=r"FusedAdam only support (fp16, bf16 and fp32|fp16/bf16 and fp32|fp16 and fp32)",
        source="apex apex/optimizers/fused_adam.py (HEAD 6424da3, 2026-07-08)",
    ),
    KnownFailure(
        name="apex_fused_adam_sparse", types=_RUNTIME, knob="optimizer",
        pattern=r"FusedAdam does not support sparse gradients",
        source="apex apex/optimizers/fused_adam.py (HEAD 6424da3, 2026-07-08)",
    ),
    # apex's `def zero_grad(self):` takes no argument; a caller passing set_to_none cannot use apex.
    KnownFailure(
        name="apex_zero_grad_signature", types=("TypeError",), knob="optimizer",
        pattern=r"FusedAdam\.zero_grad\(\) got an unexpected keyword argument 'set_to_none'",
        source="apex apex/optimizers/fused_adam.py FusedAdam.zero_grad (HEAD 6424da3, 2026-07-08)",
    ),
)  # fmt: skip

# torch.compile's own failures (the backend, inductor's lowering and codegen, dynamo internals):
# matched on the class, the message is whatever the inner failure said.
_COMPILE_TYPES = frozenset(
    {
        "BackendCompilerFailed",  # torch/_dynamo/exc.py; wraps the inner exception as .inner_exception
        "InductorError",
        "LoweringException",
        "CppCompileError",
        "InternalTorchDynamoError",
        "Unsupported",
        "TritonMissing",
        "GPUTooOldForTriton",
    }
)
_COMPILE_SOURCE = "pytorch torch/_dynamo/exc.py, torch/_inductor/exc.py (torch 2.13)"

# An op that raised while Dynamo traced it (`hpo.errors.exception_chain` looks through the wrapper):
# the op's error is the failure, Dynamo only traced it, so it is never compile's own failure.
_OP_FAILED_WHILE_TRACING = "TorchRuntimeError"

_STICKY = re.compile(
    r"CUDA error: |CUBLAS_STATUS_(ALLOC_FAILED|EXECUTION_FAILED|INTERNAL_ERROR)|CUDNN_STATUS_(EXECUTION_FAILED|INTERNAL_ERROR)"
    r"|cuDNN error: CUDNN_STATUS|device-side assert triggered|an illegal memory access was encountered",
    re.IGNORECASE,
)


def match_known_failure(exc: BaseException, knobs: Knobs) -> Verdict | None:
    """The `incompatible` verdict of a known knob failure, implicating exactly the value (or the
    value with the precision) at fault; None for anything else, sticky device errors included.
    Wrappers are looked through (dynamo's BackendCompilerFailed and fake-tensor TorchRuntimeError,
    `raise ... from`): a refusal under compile earns the same verdict, with the same message, as
    without it."""
    chain = list(exception_chain(exc))
    if any(is_sticky_device_error(e) for e in chain):
        return None
    for e in chain:
        if isinstance(e, KnobUnavailable):
            return e.verdict
    # The errors themselves first: a Dynamo wrapper's text repeats its cause among hints.
    for e in sorted(chain, key=is_dynamo_wrapper):
        for failure in KNOWN_FAILURES:
            if failure.matches(e):
                return _verdict(failure.name, failure.knob, failure.with_precision, knobs, e, failure.kind)
    for e in _compile_failures(chain):
        if knobs.compile and {cls.__name__ for cls in type(e).__mro__} & _COMPILE_TYPES:
            return _verdict("compile_failed", "compile", False, knobs, e, Kind.INCOMPATIBLE)
    return None


def _compile_failures(chain: list[BaseException]) -> list[BaseException]:
    """The part of the chain that can be torch.compile's own failure: none past an op's error
    raised while tracing (its Unsupported says only that the op failed)."""
    for i, e in enumerate(chain):
        if type(e).__name__ == _OP_FAILED_WHILE_TRACING:
            return chain[:i]
    return chain


def is_sticky_device_error(exc: BaseException) -> bool:
    """A CUDA error after which the process's CUDA context cannot be trusted (an illegal memory
    access, a device-side assert, a cuBLAS/cuDNN execution or allocation failure)."""
    return any(_STICKY.search(str(e)) for e in exception_chain(exc))


def _verdict(name: str, knob: str, with_precision: bool, knobs: Knobs, exc: BaseException, kind: Kind) -> Verdict:
    """`name` is the entry that matched (kept out of the detail, which people read)."""
    values = knobs.as_dict()
    implicated = [(knob, values[knob])]
    if with_precision:
        implicated.append(("precision", knobs.precision))
    return Verdict.make(kind, f"{knob}={values[knob]}: {_message(exc)}", implicated)


def _message(exc: BaseException) -> str:
    """The first line of each exception in the chain from `exc`: a wrapper such as
    BackendCompilerFailed says only "backend=... raised:", its inner exception says why."""
    lines = []
    for e in exception_chain(exc):
        first = (str(e).strip().splitlines() or [type(e).__name__])[0]
        lines.append(first if e is exc else f"{type(e).__name__}: {first}")
    return " ".join(lines)[:300]
