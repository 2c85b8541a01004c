"""One trial without Optuna: verify its knobs, then train (hpo's loop or Lightning's)."""

from hpo.exports import lazy_exports

__all__ = ["TrialOutcome", "execute"]

__getattr__, __dir__ = lazy_exports(
    __name__,
    {
        "TrialOutcome": "outcome",
        "execute": "executor",
    },
)
