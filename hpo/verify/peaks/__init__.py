"""Memory peaks, fitted before a step runs: a knob combination's peak model fitted to real steps
from the smallest batch up (`fit_batches`, `measure_peaks`), whether the fp32/eager reference is
predicted to fit at the trial's batch before the probe times it there (`reference_over_limit`),
and what the fit decides before training, in one process or on each rank: a batch predicted over
the limit (`predicted_over`), the batch `batch_size: auto` trains at (`confirmed_batch`)."""

from hpo.exports import lazy_exports

__all__ = [
    "ALONE",
    "AUTO_HEADROOM",
    "CONFIRMATIONS",
    "Agreement",
    "at_batch",
    "auto_batch_fitting",
    "confirmed_batch",
    "confirming_peak",
    "fit_batches",
    "fitted_peaks",
    "measure_peaks",
    "memory_key",
    "memory_model_record",
    "oom_part",
    "predicted_over",
    "reference_over_limit",
]

__getattr__, __dir__ = lazy_exports(
    __name__,
    {
        "ALONE": "_auto_batch",
        "AUTO_HEADROOM": "_peak_fit",
        "CONFIRMATIONS": "_auto_batch",
        "Agreement": "_auto_batch",
        "at_batch": "_auto_batch",
        "auto_batch_fitting": "_auto_batch",
        "confirmed_batch": "_auto_batch",
        "confirming_peak": "_auto_batch",
        "fit_batches": "_peak_fit",
        "fitted_peaks": "_peak_fit",
        "measure_peaks": "_peak_fit",
        "memory_key": "_peak_fit",
        "memory_model_record": "_auto_batch",
        "oom_part": "_auto_batch",
        "predicted_over": "_auto_batch",
        "reference_over_limit": "_reference_fit",
    },
)
