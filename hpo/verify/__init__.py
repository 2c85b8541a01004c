"""The pre-trial probe: a real step under the trial's knobs against the fp32/eager reference, within
bounds measured on the model; the verdict cache; failure classification."""

from hpo.exports import lazy_exports

__all__ = ["MemoryVerdicts", "NumericBound", "ProbeResult", "VerdictStore", "bound_from_floor", "run_probe"]

__getattr__, __dir__ = lazy_exports(
    __name__,
    {
        "MemoryVerdicts": "cache",
        "NumericBound": "bounds",
        "ProbeResult": "probe_result",
        "VerdictStore": "cache",
        "bound_from_floor": "bounds",
        "run_probe": "probe",
    },
)
