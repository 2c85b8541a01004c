"""The process runtime: workers, how each runs its trials (in-process, or in forkserver children),
the forkserver and its warm-up, placement on devices, the ticket budget and heartbeats, deadlines."""

from hpo.exports import lazy_exports

__all__ = [
    "NothingRunsHere",
    "Stopped",
    "TrialsCannotStart",
    "check_machine",
    "default_workers",
    "preload_lazy_imports",
    "run_worker",
    "run_workers",
    "start_early",
    "tickets_of",
]

__getattr__, __dir__ = lazy_exports(
    __name__,
    {
        "NothingRunsHere": "machine_check",
        "Stopped": "interrupts",
        "TrialsCannotStart": "runners",
        "check_machine": "machine_check",
        "default_workers": "placement",
        "preload_lazy_imports": "forkserver_warmup",
        "run_worker": "workers",
        "run_workers": "workers",
        "start_early": "forkserver",
        "tickets_of": "ticket_claims",
    },
)
