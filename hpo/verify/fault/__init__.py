"""Which knob values a failure is blamed on: the fp32/eager/for-loop reference every trial is compared
with and the values that differ from it (`REFERENCE_KNOBS`, `differing_from_reference`), the
refusals upstream libraries name (`match_known_failure`), and the differential run that narrows a
measured failure to the value or pair at fault (`isolate`). Shared by the probe, the slow proof and
the machine check, below all three."""

from hpo.exports import lazy_exports

__all__ = [
    "REFERENCE_KNOBS",
    "differing_from_reference",
    "is_sticky_device_error",
    "isolate",
    "match_known_failure",
    "ran_other_than_reference",
]

__getattr__, __dir__ = lazy_exports(
    __name__,
    {
        "REFERENCE_KNOBS": "_reference_knobs",
        "differing_from_reference": "_reference_knobs",
        "is_sticky_device_error": "_known_failures",
        "isolate": "_differential",
        "match_known_failure": "_known_failures",
        "ran_other_than_reference": "_reference_knobs",
    },
)
