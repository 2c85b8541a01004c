"""What Optuna may print in a process that runs trials, and what it may not: hpo prints its own
line per trial, and two warnings that fire on every trial say nothing the user can act on."""

from __future__ import annotations

import warnings

import optuna

from hpo.logging import mask_library_logs

# GP clips a rejected trial's infinite value to the worst finite one for its fit: exactly what a
# rejected region deserves (see hpo.study._objective), so the per-sampling warning is noise.
GP_CLIPS_INFINITE = "Clip non-finite values to the min/max finite values for GP fittings"


def quiet_optuna() -> None:
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    mask_library_logs("optuna")  # its "Trial N failed" warning quotes the error, which may quote a URL
    # multivariate/group TPE, heartbeats and metric names are "experimental" in Optuna, stable in use.
    warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)
    warnings.filterwarnings("ignore", message=GP_CLIPS_INFINITE)
