"""The study strategy: how a study runs, between the command line and the workers.

`run_study` runs a study from its search space as `hpo run` does; `Objective` runs one Optuna trial
with hpo's probe, verdicts and records, for a study the user drives (`hpo.run_study` and
`hpo.Objective` at the top level). Before the first trial, `ready_to_run` checks what this machine
can run and makes (or reads) the decision of `study.strategy: probe_first`: its opening sweep
(`sweep`, the sweep of `hpo probe`), the race that times again the combinations that could be kept
(`raced_times`), their ranking (`rank_precision`) and the decision the study stores (`make_decision`,
`decide`; read back by `hpo.reporting._sweep_decision`).
"""

from hpo.exports import lazy_exports

__all__ = [
    "FAILED_ATTR",
    "LOCK_ATTR",
    "NOISE_FLOOR",
    "TIE_MARGIN",
    "MemoryFit",
    "NothingVerified",
    "Objective",
    "Race",
    "Ranked",
    "SweepRow",
    "Timing",
    "WarmModels",
    "WorkersFailed",
    "as_space",
    "batch_ceiling",
    "combinations",
    "decide",
    "kept_of",
    "knobs_key",
    "make_decision",
    "memory_fit",
    "outpaced",
    "raced_times",
    "rank_precision",
    "ready_to_run",
    "rejected_lines",
    "run_study",
    "sweep",
    "table",
]

__getattr__, __dir__ = lazy_exports(
    __name__,
    {
        "FAILED_ATTR": "_probe_first",
        "LOCK_ATTR": "_probe_first",
        "NOISE_FLOOR": "_ranking",
        "TIE_MARGIN": "_ranking",
        "MemoryFit": "_memory_fit",
        "NothingVerified": "_errors",
        "Objective": "_objective",
        "Race": "_race",
        "Ranked": "_ranking",
        "SweepRow": "_rows",
        "Timing": "_ranking",
        "WarmModels": "_warm_models",
        "WorkersFailed": "_errors",
        "as_space": "_run",
        "batch_ceiling": "_memory_fit",
        "combinations": "_sweep",
        "decide": "_probe_first",
        "kept_of": "_ranking",
        "knobs_key": "_warm_models",
        "make_decision": "_decision",
        "memory_fit": "_memory_fit",
        "outpaced": "_ranking",
        "raced_times": "_race",
        "rank_precision": "_ranking",
        "ready_to_run": "_run",
        "rejected_lines": "_ranking",
        "run_study": "_run",
        "sweep": "_sweep",
        "table": "_rows",
    },
)
