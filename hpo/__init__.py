"""hpo: systems-aware hyperparameter search for PyTorch."""

__version__ = "0.1.0"

# The version of the exported config format; `hpo train` refuses configs from a newer one.
CONFIG_FORMAT = 1

__all__ = ["__version__", "CONFIG_FORMAT"]
