"""Capability probes, device peaks, memory meters, the trial runtime."""

from hpo.exports import lazy_exports

__all__ = ["MemoryMeter", "peak_for", "resolve_device", "trial_runtime", "utilization"]

__getattr__, __dir__ = lazy_exports(
    __name__,
    {
        "MemoryMeter": "memory",
        "peak_for": "peaks",
        "resolve_device": "runtime",
        "trial_runtime": "runtime",
        "utilization": "peaks",
    },
)
