"""The Optuna glue: create or resume a study, its samplers and the avoidance wrapper, the objective
and the one place that calls `trial.suggest_*` (a probe_first trial's kept knobs included), enqueued
and warm-started trials."""

from hpo.exports import lazy_exports

__all__ = [
    "AvoidKnownFailures",
    "WorkerObjective",
    "PRUNERS",
    "SAMPLERS",
    "SAMPLER_NOTES",
    "avoiding_here",
    "build_sampler",
    "create_or_resume",
    "enqueue_config",
    "enqueue_file",
    "open_hpo_study",
    "sampler_requirements",
    "space_of",
    "suggest_config",
    "warm_start",
]

__getattr__, __dir__ = lazy_exports(
    __name__,
    {
        "AvoidKnownFailures": "_avoid",
        "WorkerObjective": "_objective",
        "PRUNERS": "_samplers",
        "SAMPLERS": "_samplers",
        "SAMPLER_NOTES": "_samplers",
        "avoiding_here": "_avoid",
        "build_sampler": "_create",
        "create_or_resume": "_create",
        "enqueue_config": "_enqueue",
        "enqueue_file": "_enqueue",
        "open_hpo_study": "_create",
        "sampler_requirements": "_samplers",
        "space_of": "_create",
        "suggest_config": "_suggest",
        "warm_start": "_warm_start",
    },
)
