"""The assembled model (model, knobs, optimizer, scaler) and the one step runner."""

from hpo.exports import lazy_exports

__all__ = ["AssembledModel", "NonFiniteLoss", "run_step"]

__getattr__, __dir__ = lazy_exports(
    __name__,
    {
        "AssembledModel": "assembly",
        "NonFiniteLoss": "step",
        "run_step": "step",
    },
)
