"""Every systems-knob value, one spec each (the registry), and how each is applied."""

from hpo.exports import lazy_exports

__all__ = [
    "ATTENTION_SPECS",
    "COMPILE_SPECS",
    "KNOB_DEFAULTS",
    "KNOB_NAMES",
    "OPTIMIZER_SPECS",
    "PRECISION_SPECS",
    "attention_function",
    "spec_for",
]

__getattr__, __dir__ = lazy_exports(
    __name__,
    {
        "ATTENTION_SPECS": "registry",
        "COMPILE_SPECS": "registry",
        "KNOB_DEFAULTS": "registry",
        "KNOB_NAMES": "registry",
        "OPTIMIZER_SPECS": "registry",
        "PRECISION_SPECS": "registry",
        "attention_function": "attention_kernels",
        "spec_for": "registry",
    },
)
