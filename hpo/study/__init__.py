"""The Optuna glue: create or resume a study, its samplers and the avoidance wrapper, the objective
and the one place that calls `trial.suggest_*`, enqueued and warm-started trials, the probe_first
strategy."""
