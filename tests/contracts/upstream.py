"""What each upstream GPU path really produces, as read from its source: the op names an H100 step
shows in torch.profiler (CPU-side names: aten ops, custom ops, autograd Function class names), the
refusal and error messages, and the optimizer's ops on its first and later steps.

Each entry names the upstream file and version it was read from. Nothing here ran on a GPU: these
are the contracts hpo's evidence and failure classification are tested against.
"""

from __future__ import annotations

# Present in every training step of a causal LM, whatever the attention: the cross-entropy loss
# (torch/nn/functional.py cross_entropy -> aten::cross_entropy_loss, torch 2.13).
LOSS_OPS = frozenset(
    {
        "aten::cross_entropy_loss",
        "aten::log_softmax",
        "aten::_log_softmax",
        "aten::_log_softmax_backward_data",
        "aten::nll_loss",
        "aten::nll_loss_nd",
        "aten::nll_loss_forward",
        "aten::nll_loss_backward",
        "LogSoftmaxBackward0",
        "NllLossBackward0",
        "aten::linear",
        "aten::addmm",
        "aten::mm",
    }
)

# Attention ops per backend, forward and backward, on CUDA.
ATTENTION_OPS: dict[str, frozenset[str]] = {
    # hpo.knobs.attention_kernels.eager_attention: matmul + torch.softmax (aten/src/ATen/native/SoftMax.cpp).
    "eager": frozenset(
        {"aten::matmul", "aten::bmm", "aten::softmax", "aten::_softmax", "aten::_softmax_backward_data", "SoftmaxBackward0"}
    ),
    # aten/src/ATen/native/transformers/cuda/attention.cu and attention_backward.cu (torch 2.13):
    # each SDPA kernel's entry op, and the op it calls.
    "sdpa_flash": frozenset(
        {
            "aten::scaled_dot_product_attention",
            "aten::_scaled_dot_product_flash_attention",
            "aten::_flash_attention_forward",
            "aten::_scaled_dot_product_flash_attention_backward",
            "aten::_flash_attention_backward",
            "ScaledDotProductFlashAttentionBackward0",
        }
    ),
    "sdpa_efficient": frozenset(
        {
            "aten::scaled_dot_product_attention",
            "aten::_scaled_dot_product_efficient_attention",
            "aten::_efficient_attention_forward",  # the op xformers' cutlass path also calls
            "aten::_scaled_dot_product_efficient_attention_backward",
            "aten::_efficient_attention_backward",
            "ScaledDotProductEfficientAttentionBackward0",
        }
    ),
    "sdpa_cudnn": frozenset(
        {
            "aten::scaled_dot_product_attention",
            "aten::_scaled_dot_product_cudnn_attention",
            "aten::_scaled_dot_product_cudnn_attention_backward",
            "ScaledDotProductCudnnAttentionBackward0",
        }
    ),
    # aten/src/ATen/native/transformers/attention.cpp _scaled_dot_product_attention_math (torch 2.13):
    # bmm + _safe_softmax, which calls aten::softmax; seen on CPU with the profiler, same on CUDA.
    "sdpa_math": frozenset(
        {
            "aten::scaled_dot_product_attention",
            "aten::_scaled_dot_product_attention_math",
            "aten::_safe_softmax",
            "aten::softmax",
            "aten::_softmax",
            "aten::bmm",
            "SafeSoftmaxBackward0",
        }
    ),
    # flash-attention flash_attn/flash_attn_interface.py (v2.7.0+): torch.library custom ops
    # flash_attn::_flash_attn_forward / _flash_attn_backward, under the FlashAttnFunc autograd Function.
    "flash_attn": frozenset(
        {"FlashAttnFunc", "flash_attn::_flash_attn_forward", "FlashAttnFuncBackward", "flash_attn::_flash_attn_backward"}
    ),
    # xformers xformers/ops/fmha/__init__.py (v0.0.35): memory_efficient_attention -> _fMHA.apply;
    # cutlass.py FwOp.OPERATOR = get_operator("aten", "_efficient_attention_forward").
    "xformers": frozenset(
        {"_fMHA", "aten::_efficient_attention_forward", "_fMHABackward", "aten::_efficient_attention_backward"}
    ),
}

# xformers v0.0.35 with the flash_attn_3 wheel on Hopper: fmha/dispatch.py prefers flash3.FwOp,
# whose flash3.py registers the custom op xformers_flash3::flash_fwd calling torch.ops.flash_attn_3.fwd.
# hpo must read this as xformers (the backend it asked for), never as flash_attn.
XFORMERS_FA3_OPS = frozenset(
    {
        "_fMHA",
        "xformers_flash3::flash_fwd",
        "flash_attn_3::fwd",
        "_fMHABackward",
        "xformers_flash3::flash_bwd",
        "flash_attn_3::bwd",
    }
)

# flash-attention before v2.7.0: no custom ops, only the autograd Function. Unsupported (the window
# is [2.7.1, 2.8.4]); it must read as "not observed", never as eager.
FLASH_ATTN_2_6_OPS = frozenset({"FlashAttnFunc", "FlashAttnFuncBackward"})

# Optimizer ops inside Optimizer.step, on the first and on a later step.
OPTIMIZER_OPS: dict[str, dict[str, frozenset[str]]] = {
    # torch/optim/adamw.py -> adam.py _fused_adam (torch 2.13): torch._fused_adamw_ every step, and
    # the step counters bumped with _foreach_add_.
    "fused": {
        "first": frozenset({"aten::_foreach_add_", "aten::_fused_adamw_", "aten::zeros", "aten::zeros_like"}),
        "later": frozenset({"aten::_foreach_add_", "aten::_fused_adamw_"}),
    },
    # torch/optim/adam.py _multi_tensor_adam (torch 2.13).
    "foreach": {
        "first": frozenset(
            {"aten::_foreach_add_", "aten::_foreach_lerp_", "aten::_foreach_mul_", "aten::_foreach_addcmul_", "aten::zeros_like"}
        ),
        "later": frozenset(
            {
                "aten::_foreach_add_",
                "aten::_foreach_lerp_",
                "aten::_foreach_mul_",
                "aten::_foreach_sqrt",
                "aten::_foreach_addcdiv_",
            }
        ),
    },
    # torch/optim/adam.py _single_tensor_adam (torch 2.13).
    "forloop": {
        "first": frozenset({"aten::add_", "aten::lerp_", "aten::mul_", "aten::addcmul_", "aten::sqrt", "aten::zeros_like"}),
        "later": frozenset({"aten::add_", "aten::lerp_", "aten::mul_", "aten::addcmul_", "aten::sqrt", "aten::addcdiv_"}),
    },
    # apex apex/optimizers/fused_adam.py (HEAD 6424da3, 2026-07-08): state is created with torch.zeros_like on
    # the first step; every step launches amp_C.multi_tensor_adam through multi_tensor_applier,
    # which the profiler does not record as an op. A later step shows no op at all.
    "apex": {
        "first": frozenset({"aten::zeros_like", "aten::empty_like", "aten::zero_"}),
        "later": frozenset(),
    },
}
OPTIMIZER_MODULES = {
    "fused": "torch.optim.adamw",
    "foreach": "torch.optim.adamw",
    "forloop": "torch.optim.adamw",
    "apex": "apex.optimizers.fused_adam",  # apex/optimizers/fused_adam.py, class FusedAdam
}

# Refusal and error messages, verbatim.
MESSAGES = {
    # aten/src/ATen/native/transformers/sdp_utils_cpp.cpp (torch 2.13), also raised by this torch on CPU.
    "sdpa_cpu_no_viable_backend": (
        "RuntimeError",
        "No viable backend for scaled_dot_product_attention was found. "
        "This is likely due to turning off both the math kernel and the fused kernels.",
    ),
    # aten/src/ATen/native/transformers/cuda/sdp_utils.cpp select_sdp_backend (torch 2.13).
    "sdpa_cuda_no_available_kernel": ("RuntimeError", "No available kernel. Aborting execution."),
    # flash-attention csrc/flash_attn/flash_api.cpp mha_fwd (read at v2.7.0 and v2.8.3.post1).
    "flash_attn_dtype": ("RuntimeError", "FlashAttention only support fp16 and bf16 data type"),
    "flash_attn_arch": ("RuntimeError", "FlashAttention only supports Ampere GPUs or newer."),
    # xformers xformers/ops/fmha/dispatch.py _ensure_op_supports_or_raise / _run_priority_list (v0.0.35).
    "xformers_no_operator": (
        "NotImplementedError",
        "No operator found for `memory_efficient_attention_forward` with inputs:\n"
        "     query       : shape=(2, 16, 4, 32) (torch.float32)\n"
        "`fa3F@3.0.0` is not supported because:\n    dtype=torch.float32 (supported: {torch.bfloat16, torch.float16})",
    ),
    # torch/_inductor/kernel/flex/flex_cpu.py (torch 2.13): training asks for the logsumexp.
    "flex_attention_cpu_backward": (
        "NotImplementedError",
        "torch.compile on CPU only supports inference and `return_lse` is not supported yet.",
    ),
    # torch/optim/optimizer.py _device_dtype_check_for_fused (torch 2.13; the device list is
    # _get_fused_kernels_supported_devices() of torch/utils/_foreach_utils.py), raised by this torch
    # on CPU for an integer parameter (tests/contracts/test_known_failures.py raises it).
    "torch_fused_optimizer_device": (
        "RuntimeError",
        "`fused=True` requires all the params to be floating point Tensors of supported devices: "
        "['mps', 'cuda', 'xpu', 'hpu', 'cpu', 'mtia', 'privateuseone'] but torch.int64 and cpu",
    ),
    # torch/optim/adam.py Adam.__init__ (torch 2.13).
    "torch_fused_optimizer_flags": ("RuntimeError", "`fused` and `foreach` cannot be `True` together."),
    # apex apex/optimizers/fused_adam.py FusedAdam.step (HEAD 6424da3, 2026-07-08; some forks say
    # "FusedAdam only support fp16, bf16 and fp32.", matched too).
    "apex_fused_adam_dtype": ("RuntimeError", "FusedAdam only support fp16 and fp32."),
    "apex_fused_adam_sparse": (
        "RuntimeError",
        "FusedAdam does not support sparse gradients, please consider SparseAdam instead",
    ),
    # Python's own message for apex's `def zero_grad(self):` called with set_to_none=.
    "apex_zero_grad_signature": ("TypeError", "FusedAdam.zero_grad() got an unexpected keyword argument 'set_to_none'"),
}

# What each known failure implicates, for a trial whose knobs are given. (precision, attention,
# optimizer, compile) -> the exact implicated pairs.
EXPECTED_IMPLICATES = {
    "sdpa_cpu_no_viable_backend": (dict(precision="bf16", attention="sdpa_efficient"), [("attention", "sdpa_efficient")]),
    "sdpa_cuda_no_available_kernel": (
        dict(precision="fp32", attention="sdpa_flash"),
        [("attention", "sdpa_flash"), ("precision", "fp32")],
    ),
    "flash_attn_dtype": (dict(precision="fp32", attention="flash_attn"), [("attention", "flash_attn"), ("precision", "fp32")]),
    "flash_attn_arch": (dict(precision="bf16", attention="flash_attn"), [("attention", "flash_attn")]),
    "xformers_no_operator": (dict(precision="fp32", attention="xformers"), [("attention", "xformers"), ("precision", "fp32")]),
    "flex_attention_cpu_backward": (dict(precision="fp32", compile="default"), [("compile", "default")]),
    "torch_fused_optimizer_device": (dict(precision="bf16", optimizer="fused"), [("optimizer", "fused")]),
    "torch_fused_optimizer_flags": (dict(precision="fp32", optimizer="fused"), [("optimizer", "fused")]),
    "apex_fused_adam_dtype": (dict(precision="fp16", optimizer="apex"), [("optimizer", "apex")]),
    "apex_fused_adam_sparse": (dict(precision="fp32", optimizer="apex"), [("optimizer", "apex")]),
    "apex_zero_grad_signature": (dict(precision="bf16", optimizer="apex"), [("optimizer", "apex")]),
}

# Errors after which a CUDA process must not be reused: c10/cuda/CUDAException.h C10_CUDA_CHECK
# ("CUDA error: ..."), aten/src/ATen/cuda/Exceptions.h TORCH_CUDABLAS_CHECK and cuDNN checks (torch 2.13).
STICKY_MESSAGES = (
    "CUDA error: an illegal memory access was encountered\n"
    "CUDA kernel errors might be asynchronously reported at some other API call",
    "CUDA error: device-side assert triggered",
    "CUDA error: unspecified launch failure",
    "CUDA error: CUBLAS_STATUS_ALLOC_FAILED when calling `cublasCreate(handle)`",
    "CUDA error: CUBLAS_STATUS_EXECUTION_FAILED when calling `cublasGemmEx( handle, opa, opb, m, n, k, &falpha, a, CUDA_R_16BF, lda, b, CUDA_R_16BF, ldb, &fbeta, c, CUDA_R_16BF, ldc, compute_type, CUBLAS_GEMM_DEFAULT_TENSOR_OP)`",
    "cuDNN error: CUDNN_STATUS_EXECUTION_FAILED",
)

# flash-attn versions xformers v0.0.35 accepts (xformers/ops/fmha/flash.py FLASH_VER_MIN/FLASH_VER_LAST).
FLASH_ATTN_WINDOW = ("2.7.1", "2.8.4")
XFORMERS_VERSION = "0.0.35"
