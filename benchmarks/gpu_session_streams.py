"""The gpu-check streams `scripts/gpu-session` runs in parallel: each a slice of the knob matrix.

At most 8 combinations a stream, about 10-15 s apiece in a fresh process (the H200 run did 18 in
240 s with six streams side by side), so that each stream ends within the correctness step's limit.
Each covers one of the H200 run's failures (docs/benchmarks/gpu.md) or the knobs around it.
Standard library only, like the runner.
"""

from __future__ import annotations

__all__ = ["STREAMS", "stream_args", "stream_size"]


def _args(text: str) -> list[str]:
    return text.split()


STREAMS = {
    # pinned kernels observed as asked; fp32 refusals; cuDNN's first-call cost at bf16, the row the
    # first-call fix must be seen on, first (gpu-check runs the combinations in the order given)
    "attention": _args(
        "--workloads causal_lm --precision bf16 fp32 --attention sdpa_cudnn sdpa eager sdpa_flash --optimizer fused"
    ),
    "optimizer": _args(
        "--workloads causal_lm --precision bf16 --attention sdpa --optimizer forloop foreach fused --checkpointing false true"
    ),
    # Lightning's probe timing against its training speed
    "lightning": _args(
        "--workloads causal_lm_lightning --precision bf16 --attention sdpa_cudnn eager sdpa sdpa_flash --optimizer fused"
    ),
    # cuDNN's RNN backward needs train mode: every combination crashed on the H200
    "rnn": _args("--workloads timeseries_classification --precision fp32 bf16 fp16 --attention eager --optimizer forloop fused"),
    # graphs compiled per kernel: bf16 cuDNN then flash must each observe their own; fp32 flash refused with its cause
    "compile": _args(
        "--workloads causal_lm --precision bf16 fp32 --attention sdpa_cudnn sdpa_flash --optimizer fused --compile default"
    ),
}
# What a stream that does not choose it runs with: 5 training steps, 100 s per combination at most.
STREAM_DEFAULTS = {"--checkpointing": ["false"], "--compile": ["false"], "--steps": ["5"], "--timeout": ["100"]}
# --toy: one combination per stream, of a tiny model, on the CPU.
TOY_STREAM = _args(
    "--workloads benchmarks.gpu_session_toy:ToyCausalLM --precision fp32 --attention sdpa --optimizer fused "
    "--checkpointing false --compile false --steps 2 --batch-size 4 --device cpu --timeout 120"
)


def stream_size(name: str) -> int:
    """How many combinations stream `name` runs: the product of its lists' lengths."""
    args, size, count = stream_args(name), 1, 0
    for arg in args:
        if arg.startswith("--"):
            size, count = size * max(count, 1), 0
        else:
            count += 1
    return size * max(count, 1) if args else 0


def stream_args(name: str, toy: bool = False) -> list[str]:
    """gpu-check's arguments for stream `name` (its selection and the defaults it does not choose)."""
    if toy:
        return list(TOY_STREAM)
    chosen = STREAMS[name]
    return chosen + [arg for flag, values in STREAM_DEFAULTS.items() if flag not in chosen for arg in (flag, *values)]
