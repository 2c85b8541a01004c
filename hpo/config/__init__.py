"""The one schema of a search-space file, its params, and the frozen config of one trial."""

from hpo.exports import lazy_exports

__all__ = [
    "Knobs",
    "LoaderSettings",
    "SearchSpace",
    "Target",
    "TrainingConfig",
    "TrialConfig",
    "build_config",
    "load_config",
    "load_space",
    "parse_space",
]

__getattr__, __dir__ = lazy_exports(
    __name__,
    {
        "Knobs": "trial",
        "LoaderSettings": "trial",
        "SearchSpace": "space",
        "Target": "trial",
        "TrainingConfig": "trial",
        "TrialConfig": "trial",
        "build_config": "resolve",
        "load_config": "resolve",
        "load_space": "space",
        "parse_space": "space",
    },
)
