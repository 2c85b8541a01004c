"""The process runtime: workers, how each runs its trials (in-process, or in forkserver children),
the forkserver and its warm-up, placement on devices, the ticket budget and heartbeats, deadlines."""

from hpo.exports import lazy_exports

__all__ = [
    "BindOnStart",
    "GuardedObjective",
    "NothingRunsHere",
    "Stopped",
    "TrialsCannotStart",
    "ask_in_worker",
    "bind_ticket",
    "check_machine",
    "default_workers",
    "gpus_per_trial",
    "keeps_references",
    "open_handed",
    "preload_lazy_imports",
    "quiet_optuna",
    "run_worker",
    "run_workers",
    "sampler_for_ticket",
    "start_early",
    "tickets_of",
    "worker_name",
]

__getattr__, __dir__ = lazy_exports(
    __name__,
    {
        "BindOnStart": "_ticket_claims",
        "GuardedObjective": "_guard",
        "NothingRunsHere": "_machine_check",
        "Stopped": "_interrupts",
        "TrialsCannotStart": "_runners",
        "ask_in_worker": "_handed",
        "bind_ticket": "_ticket_claims",
        "check_machine": "_machine_check",
        "default_workers": "_placement",
        "gpus_per_trial": "_placement",
        "keeps_references": "_reference_folders",
        "open_handed": "_handed",
        "preload_lazy_imports": "_forkserver_warmup",
        "quiet_optuna": "_quiet",
        "run_worker": "_workers",
        "run_workers": "_workers",
        "sampler_for_ticket": "_guard",
        "start_early": "_forkserver",
        "tickets_of": "_ticket_claims",
        "worker_name": "_runners",
    },
)
