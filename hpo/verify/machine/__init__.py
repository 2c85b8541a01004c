"""What this machine can run, known before any trial: each searched value's needs and kernel checked
once (`check_values`, behind `hpo doctor`'s table), and the result as torch-free data a worker
reads (`MachineCheck`, `nothing_left`, `searched_parts`)."""

from hpo.exports import lazy_exports

__all__ = [
    "CHECKED_KNOBS",
    "MachineCheck",
    "check_values",
    "nothing_left",
    "registry_values",
    "searched_parts",
    "value_capability",
]

__getattr__, __dir__ = lazy_exports(
    __name__,
    {
        "CHECKED_KNOBS": "_check_result",
        "MachineCheck": "_check_result",
        "check_values": "_kernel_check",
        "nothing_left": "_check_result",
        "registry_values": "_kernel_check",
        "searched_parts": "_check_result",
        "value_capability": "_kernel_check",
    },
)
