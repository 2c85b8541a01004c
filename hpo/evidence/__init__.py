"""What ran: profiler ops, dispatched dtypes, compiled graphs, recomputation."""

from hpo.exports import lazy_exports

__all__ = ["StepEvidence", "capture_step", "mismatches", "observed_knobs"]

__getattr__, __dir__ = lazy_exports(
    __name__,
    {
        "StepEvidence": "observe",
        "capture_step": "capture",
        "mismatches": "observe",
        "observed_knobs": "observe",
    },
)
