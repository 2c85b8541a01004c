"""The assembled model (model, knobs, optimizer, scaler) and the one step runner."""

from hpo.exports import lazy_exports

__all__ = [
    "AssembledModel",
    "BatchStream",
    "DeviceHealth",
    "MIN_GRAD_SCALE",
    "NonFiniteLoss",
    "batch_stream",
    "check_settings",
    "counting_flops",
    "model_flops_per_sample",
    "run_step",
]

__getattr__, __dir__ = lazy_exports(
    __name__,
    {
        "AssembledModel": "_assembly",
        "BatchStream": "_loader_stream",
        "DeviceHealth": "_health",
        "MIN_GRAD_SCALE": "_assembly",
        "NonFiniteLoss": "_step",
        "batch_stream": "_loader_stream",
        "check_settings": "_loader",
        "counting_flops": "_flops",
        "model_flops_per_sample": "_flops",
        "run_step": "_step",
    },
)
