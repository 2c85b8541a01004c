"""The pre-trial probe (`run_probe`): one real step under the trial's knobs, compared with the
fp32/eager/for-loop reference's on the same samples and weights (the reference's side kept between
probes: `ReferenceFiles`, `KeptReferences`), within numeric bounds measured on the model
(`NumericBound`); what it found (`ProbeResult`) and how that is kept (`keep_probe`, `speed_fact`)."""

from hpo.exports import lazy_exports

__all__ = [
    "KeptReferences",
    "NumericBound",
    "ProbeResult",
    "ReferenceFiles",
    "ReferenceMemory",
    "backed_off",
    "bound_from_floor",
    "keep_probe",
    "loss_and_grads",
    "relative_errors",
    "rounding_floor",
    "run_probe",
    "speed_fact",
]

__getattr__, __dir__ = lazy_exports(
    __name__,
    {
        "KeptReferences": "_kept_reference",
        "NumericBound": "_bounds",
        "ProbeResult": "_result",
        "ReferenceFiles": "_kept_reference",
        "ReferenceMemory": "_kept_reference",
        "backed_off": "_compared_step",
        "bound_from_floor": "_bounds",
        "keep_probe": "_result",
        "loss_and_grads": "_compared_step",
        "relative_errors": "_bounds",
        "rounding_floor": "_compared_step",
        "run_probe": "_probe",
        "speed_fact": "_result",
    },
)
