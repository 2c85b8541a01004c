"""Where studies live: open an Optuna storage with hpo's heartbeats and connection rules, a study's
default URL, the ticket budget that caps a study's trials across workers, retries of crashed trials,
and the one module that touches Optuna's private storage API (`optuna_compat`)."""

from hpo.exports import lazy_exports

__all__ = [
    "TicketBudget",
    "default_storage",
    "load_study_or_none",
    "open_storage",
    "storage_of",
    "study_id_of",
    "trial_id_of",
]

__getattr__, __dir__ = lazy_exports(
    __name__,
    {
        "TicketBudget": "tickets",
        "default_storage": "urls",
        "load_study_or_none": "open",
        "open_storage": "open",
        "storage_of": "optuna_compat",
        "study_id_of": "optuna_compat",
        "trial_id_of": "optuna_compat",
    },
)
