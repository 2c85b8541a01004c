"""What a study run can end with before or instead of its trials, beside `hpo.errors`: torch-free, so
that `hpo run` catches them without importing what raises them."""

from __future__ import annotations

from typing import TYPE_CHECKING

from hpo.errors import ExitCode, HpoError, NoKnobsRunHere

if TYPE_CHECKING:
    import optuna

__all__ = ["NothingVerified", "WorkersFailed"]


class NothingVerified(NoKnobsRunHere):
    """No combination of the space passed probe_first's opening sweep: one line per rejected value
    (`hpo run` and `hpo worker` exit 4, `NO_KNOBS_RUN_HERE`)."""

    headline = "no knob combination passed the sweep (study.strategy: probe_first); rejected:"


class WorkersFailed(HpoError):
    """Some of the study's local workers failed (exit 5, `WORKER_FAILED`); `study` holds what the
    others ran."""

    exit_code = ExitCode.WORKER_FAILED

    def __init__(self, failed: int, study: optuna.Study):
        super().__init__(f"{failed} worker(s) of study {study.study_name!r} failed; see the log above")
        self.failed, self.study = failed, study
