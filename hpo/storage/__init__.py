"""Where studies live: open an Optuna storage with hpo's heartbeats and connection rules, a study's
default URL, the ticket budget that caps a study's trials across workers, retries of crashed trials,
and the one module that touches Optuna's private storage API (`_optuna_compat`)."""

from hpo.exports import lazy_exports

__all__ = [
    "BUDGET",
    "MAX_RETRIES_ATTR",
    "RetryWithRefund",
    "TicketBudget",
    "UNFINISHED",
    "add_study_user_attr",
    "default_storage",
    "engine_of",
    "fail_crashed_trial",
    "liveness",
    "load_study_or_none",
    "open_storage",
    "rdb_backend",
    "record_feasibility",
    "record_feasibility_of",
    "set_user_attrs",
    "share_connection_with_children",
    "storage_of",
    "study_id_of",
    "take_trial",
    "trial_id_of",
]

__getattr__, __dir__ = lazy_exports(
    __name__,
    {
        "BUDGET": "_tickets",
        "MAX_RETRIES_ATTR": "_retry",
        "RetryWithRefund": "_retry",
        "TicketBudget": "_tickets",
        "UNFINISHED": "_retry",
        "add_study_user_attr": "_optuna_compat",
        "default_storage": "_urls",
        "engine_of": "_optuna_compat",
        "fail_crashed_trial": "_retry",
        "liveness": "_optuna_compat",
        "load_study_or_none": "_open",
        "open_storage": "_open",
        "rdb_backend": "_optuna_compat",
        "record_feasibility": "_optuna_compat",
        "record_feasibility_of": "_optuna_compat",
        "set_user_attrs": "_optuna_compat",
        "share_connection_with_children": "_pools",
        "storage_of": "_optuna_compat",
        "study_id_of": "_optuna_compat",
        "take_trial": "_optuna_compat",
        "trial_id_of": "_optuna_compat",
    },
)
