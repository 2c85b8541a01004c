"""Memory peaks, fitted before a step runs: a knob combination's peak model fitted to real steps
from the smallest batch up (`fit_batches`, `measure_peaks`), and whether the fp32/eager reference
is predicted to fit at the trial's batch before the probe times it there (`reference_over_limit`)."""

from hpo.exports import lazy_exports

__all__ = [
    "AUTO_HEADROOM",
    "fit_batches",
    "fitted_peaks",
    "measure_peaks",
    "memory_key",
    "reference_over_limit",
]

__getattr__, __dir__ = lazy_exports(
    __name__,
    {
        "AUTO_HEADROOM": "_peak_fit",
        "fit_batches": "_peak_fit",
        "fitted_peaks": "_peak_fit",
        "measure_peaks": "_peak_fit",
        "memory_key": "_peak_fit",
        "reference_over_limit": "_reference_fit",
    },
)
