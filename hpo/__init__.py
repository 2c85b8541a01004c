"""hpo: systems-aware hyperparameter search for PyTorch."""

__version__ = "0.1.0"

# The version of the exported config format (2: a search-space file with every value fixed; 1: the
# `training:` layout of hpo 0.1, still read). Configs from a newer format are refused.
CONFIG_FORMAT = 2

__all__ = ["__version__", "CONFIG_FORMAT"]
