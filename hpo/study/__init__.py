"""The Optuna glue: create or resume a study, its samplers and the avoidance wrapper, the objective
and the one place that calls `trial.suggest_*` (a probe_first trial's kept knobs included), enqueued
and warm-started trials."""

from hpo.exports import lazy_exports

__all__ = [
    "PRUNERS",
    "SAMPLERS",
    "AvoidKnownFailures",
    "Objective",
    "build_sampler",
    "create_or_resume",
    "enqueue_config",
    "enqueue_file",
    "open_hpo_study",
    "space_of",
    "suggest_config",
]

__getattr__, __dir__ = lazy_exports(
    __name__,
    {
        "PRUNERS": "samplers",
        "SAMPLERS": "samplers",
        "AvoidKnownFailures": "avoid",
        "Objective": "objective",
        "build_sampler": "create",
        "create_or_resume": "create",
        "enqueue_config": "enqueue",
        "enqueue_file": "enqueue",
        "open_hpo_study": "create",
        "space_of": "create",
        "suggest_config": "suggest",
    },
)
