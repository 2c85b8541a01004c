"""Retrain a config file without Optuna (`hpo train`), with the same knob verification as a trial."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from hpo.config.resolve import load_config
from hpo.config.trial import TrialConfig
from hpo.errors import TrialError
from hpo.runtime import preload_lazy_imports
from hpo.trial import TrialOutcome, ended, execute
from hpo.verify.stored import MemoryVerdicts

__all__ = ["retrain"]


def retrain(path: Path) -> tuple[TrialConfig, TrialOutcome]:
    """Read and validate `path` (any config format, every value fixed), then train it, with its
    speed recorded but never judged `slow` (`study.skip_slow` read as false). A trial
    that fails outside any verdict (the workload, its data, a bug) ends with its `error:` verdict
    and its traceback under `error_traceback`, as a study's trial does: that is the trial's outcome,
    not hpo's internal error."""
    # Trained, whatever its speed: the config names what the user wants to run, and a `slow` verdict
    # refuses a trial to spare a study's budget. Its speed against the reference is still recorded
    # (`slowdown`); only what cannot run is refused. An EfficientNet exported from a study was
    # refused `slow` by one command and trained by the identical next one on a busy host.
    config = dataclasses.replace(load_config(path), skip_slow=False)
    # As a study's trial processes find them (the forkserver's warm-up): torch's lazy imports are
    # this command's start-up, not its probe's time.
    preload_lazy_imports()
    try:
        return config, execute(config, MemoryVerdicts())
    except TrialError as exc:
        return config, ended(exc.verdict, exc.attrs)
