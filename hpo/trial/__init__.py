"""One trial without Optuna: verify its knobs, then train (hpo's loop or Lightning's)."""

from hpo.exports import lazy_exports

__all__ = [
    "Phases",
    "TrialOutcome",
    "cached_verdict",
    "ended",
    "execute",
    "execute_ranks",
    "fitted_peaks",
    "workload_metric",
]

__getattr__, __dir__ = lazy_exports(
    __name__,
    {
        "Phases": "_phases",
        "TrialOutcome": "_outcome",
        "cached_verdict": "_outcome",
        "ended": "_outcome",
        "execute": "_executor",
        "execute_ranks": "_ranks",
        "fitted_peaks": "_memory_limit",
        "workload_metric": "_speed_record",
    },
)
