"""The workload protocol, the built-in workloads and the Lightning adapter."""

from hpo.exports import lazy_exports

__all__ = ["BUILTIN_WORKLOADS", "Batch", "LightningWorkload", "Workload", "WorkloadOptions", "create_workload"]

__getattr__, __dir__ = lazy_exports(
    __name__,
    {
        "BUILTIN_WORKLOADS": "catalog",
        "Batch": "base",
        "LightningWorkload": "lightning",
        "Workload": "base",
        "WorkloadOptions": "base",
        "create_workload": "catalog",
    },
)
