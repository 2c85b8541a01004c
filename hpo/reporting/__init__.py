"""What a study shows: live progress, dashboard notes, knob effects, which trials count and in what
order, knobs as observed."""

from hpo.exports import lazy_exports

__all__ = [
    "DashboardNotes",
    "KEPT_ATTR",
    "MODE_ENV",
    "TrialPrinter",
    "best_trials",
    "cells",
    "decision_note",
    "eval_line",
    "header",
    "knob_effects",
    "machine_attr",
    "make_display",
    "observed_knob",
    "report",
    "set_sink",
    "study_note_due",
    "top_trials",
    "trained_trials",
]

__getattr__, __dir__ = lazy_exports(
    __name__,
    {
        "DashboardNotes": "_notes",
        "KEPT_ATTR": "_sweep_decision",
        "MODE_ENV": "_progress",
        "TrialPrinter": "_progress",
        "best_trials": "_ranking",
        "cells": "_knob_effects",
        "decision_note": "_sweep_decision",
        "eval_line": "_progress",
        "header": "_knob_effects",
        "knob_effects": "_knob_effects",
        "machine_attr": "_machines",
        "make_display": "_progress",
        "observed_knob": "_knob_display",
        "report": "_progress",
        "set_sink": "_progress",
        "study_note_due": "_notes",
        "top_trials": "_ranking",
        "trained_trials": "_ranking",
    },
)
