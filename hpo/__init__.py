"""hpo: systems-aware hyperparameter search for PyTorch.

As a library (the reference page is docs/reference/python-api.md):

- `hpo.run_study(space, ...)` runs a study from a search-space file or a dict, as `hpo run` does,
  and returns the Optuna study.
- `hpo.Objective(space)` is an Optuna objective that runs one trial with hpo's probe, verdicts and
  records, for `optuna.create_study(...).optimize(objective, ...)` with your own sampler and callbacks.

Both are imported when first used: `import hpo` imports neither Optuna nor torch.
"""

from hpo.exports import lazy_exports

__version__ = "0.1.0"

# The version of the exported config format (2: a search-space file with every value fixed; 1: the
# `training:` layout of hpo 0.1, still read). Configs from a newer format are refused.
CONFIG_FORMAT = 2

__all__ = ["__version__", "CONFIG_FORMAT", "Objective", "run_study"]

_getattr, _dir = lazy_exports(__name__, {"Objective": "strategy", "run_study": "strategy"})


def __getattr__(name: str) -> object:
    return _getattr(name)


def __dir__() -> list[str]:
    return sorted({*_dir(), "__version__", "CONFIG_FORMAT"})
