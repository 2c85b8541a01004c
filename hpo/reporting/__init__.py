"""What a study shows: live progress, dashboard notes, knob effects, which trials count and in what
order, knobs as observed."""

from hpo.exports import lazy_exports

__all__ = [
    "DashboardNotes",
    "TrialPrinter",
    "best_trials",
    "decision_note",
    "make_display",
    "observed_knob",
    "top_trials",
    "trained_trials",
]

__getattr__, __dir__ = lazy_exports(
    __name__,
    {
        "DashboardNotes": "notes",
        "TrialPrinter": "progress",
        "best_trials": "ranking",
        "decision_note": "sweep_decision",
        "make_display": "progress",
        "observed_knob": "knob_display",
        "top_trials": "ranking",
        "trained_trials": "ranking",
    },
)
