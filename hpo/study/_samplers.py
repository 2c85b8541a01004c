"""Samplers and pruners by name: the schema's allowed names, each with its builder, what it needs
installed, and what a user should be told about how it treats hpo's knobs.

No sampler is given a `constraints_func`: Optuna 5.0 deprecates it, and TPE, NSGA-II and GP read a
rejected trial's recorded constraint (`hpo.storage.record_feasibility`) from its system
attrs without one (tests/study/test_constraints_teach_samplers.py observes each of them use it).

CMA-ES and GP have their per-trial "sampled independently" warning turned off: hpo's avoidance
hands a clashing categorical to `sample_independent` on purpose (hpo.study._avoid). (TPE's switch
for it is deprecated in Optuna 5, and with group=True TPE does not warn for it.)
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from dataclasses import dataclass

import optuna

from hpo.config.schema import PrunerSpec, SamplerSpec
from hpo.deps import is_installed

__all__ = ["PRUNERS", "SAMPLERS", "SAMPLER_NOTES", "SamplerRequirement", "sampler_requirements"]

# CmaEsSampler warns after every trial that carries constraints; hpo's trials always do.
_CMAES_IGNORES_CONSTRAINTS = "Constraints have been set, but CmaEsSampler will not use them"


def _tpe(spec: SamplerSpec) -> optuna.samplers.BaseSampler:
    extra = {} if spec.n_startup_trials is None else {"n_startup_trials": spec.n_startup_trials}
    with warnings.catch_warnings():  # multivariate/group are "experimental" in Optuna, and stable in use
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        return optuna.samplers.TPESampler(seed=spec.seed, multivariate=True, group=True, **extra)


class _QuietCmaEs(optuna.samplers.CmaEsSampler):
    """CMA-ES, told once (SAMPLER_NOTES) instead of warned per trial that it ignores constraints."""

    def after_trial(self, study, trial, state, values) -> None:
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=_CMAES_IGNORES_CONSTRAINTS)
            super().after_trial(study, trial, state, values)


SAMPLERS: dict[str, Callable[[SamplerSpec], optuna.samplers.BaseSampler]] = {
    "tpe": _tpe,
    "random": lambda s: optuna.samplers.RandomSampler(seed=s.seed),
    "nsga2": lambda s: optuna.samplers.NSGAIISampler(seed=s.seed),
    "cmaes": lambda s: _QuietCmaEs(seed=s.seed, warn_independent_sampling=False),
    "gp": lambda s: optuna.samplers.GPSampler(seed=s.seed, warn_independent_sampling=False),
}

PRUNERS: dict[str, Callable[[PrunerSpec], optuna.pruners.BasePruner]] = {
    "none": lambda s: optuna.pruners.NopPruner(),
    "median": lambda s: optuna.pruners.MedianPruner(n_warmup_steps=s.n_warmup_steps or 0),
    "hyperband": lambda s: optuna.pruners.HyperbandPruner(),
    "successive_halving": lambda s: optuna.pruners.SuccessiveHalvingPruner(),
}

# Said once when a study starts, for samplers that treat hpo's knobs differently from the others.
SAMPLER_NOTES: dict[str, str] = {
    "cmaes": (
        "CMA-ES models only numeric parameters: it samples the categorical knobs (precision, attention, "
        "optimizer, ...) independently at random, and it ignores constraints, so a rejected trial teaches "
        "it nothing; hpo's own avoidance still keeps it off every knob value or pair known to fail."
    ),
    "random": "random sampling ignores constraints; hpo's own avoidance keeps it off knob values known to fail.",
}


@dataclass(frozen=True)
class SamplerRequirement:
    name: str
    usable: bool
    why: str = ""


# Python modules each sampler needs beyond Optuna itself.
_NEEDS = {"cmaes": ("cmaes",), "gp": ("scipy", "torch")}


def sampler_requirements() -> list[SamplerRequirement]:
    """Which samplers can run here, and why not where one cannot (for `hpo doctor`)."""
    rows = []
    for name in SAMPLERS:
        missing = [m for m in _NEEDS.get(name, ()) if not is_installed(m)]
        why = f"needs {', '.join(missing)}: pip install {' '.join(missing)}" if missing else SAMPLER_NOTES.get(name, "")
        rows.append(SamplerRequirement(name, not missing, why))
    return rows
