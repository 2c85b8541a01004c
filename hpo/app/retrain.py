"""Retrain a config file without Optuna (`hpo train`), with the same knob verification as a trial."""

from __future__ import annotations

from pathlib import Path

from hpo.config.resolve import load_config
from hpo.config.trial import TrialConfig
from hpo.errors import TrialError
from hpo.runtime.forkserver_warmup import preload_lazy_imports
from hpo.trial.executor import TrialOutcome, execute
from hpo.trial.outcome import ended
from hpo.verify.cache import MemoryVerdicts

__all__ = ["retrain"]


def retrain(path: Path) -> tuple[TrialConfig, TrialOutcome]:
    """Read and validate `path` (any config format, every value fixed), then train it. A trial
    that fails outside any verdict (the workload, its data, a bug) ends with its `error:` verdict
    and its traceback under `error_traceback`, as a study's trial does: that is the trial's outcome,
    not hpo's internal error."""
    config = load_config(path)
    # As a study's trial processes find them (the forkserver's warm-up): torch's lazy imports are
    # this command's start-up, not its probe's time.
    preload_lazy_imports()
    try:
        return config, execute(config, MemoryVerdicts())
    except TrialError as exc:
        return config, ended(exc.verdict, exc.attrs)
