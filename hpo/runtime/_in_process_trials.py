"""Run each trial in the worker's own process (`hpo worker --in-process`)."""

from __future__ import annotations

import functools
import gc

import optuna

from hpo.config.space import SearchSpace
from hpo.reporting import DashboardNotes, TrialPrinter
from hpo.runtime._guard import GuardedObjective, sampler_for_ticket
from hpo.runtime._reference_folders import keeps_references
from hpo.runtime._runners import TrialsCannotStart, fail_stopped, worker_name
from hpo.runtime._ticket_claims import BindOnStart, ClaimKeeper, ClaimLost, StartHeartbeat, bind_ticket
from hpo.runtime._trial_timeout import InProcessDeadline, TrialTimeout
from hpo.storage import TicketBudget, fail_crashed_trial, storage_of

__all__ = ["InProcessTrials"]


class InProcessTrials:
    """Run each trial in this process. `study.trial_timeout_s` is enforced by SIGALRM, which ends
    a Python-level hang but not one inside C code (see `hpo.runtime._trial_timeout`)."""

    def __init__(self, study: optuna.Study, space: SearchSpace, tickets: TicketBudget):
        from hpo.runtime._forkserver_warmup import preload_lazy_imports
        from hpo.study import WorkerObjective  # imports torch
        from hpo.verify.probing import ReferenceMemory

        # What a trial process finds imported by the forkserver: torch's lazy imports are a start-up
        # cost of this process, not of its first trial's probe.
        preload_lazy_imports()
        self.study, self.space, self.tickets = study, space, tickets
        # Every trial runs in this process: the probes' reference steps stay in its memory, no file.
        self.objective = WorkerObjective(space, references=ReferenceMemory() if keeps_references(space) else None)
        self.notes = DashboardNotes()
        self.callbacks = [TrialPrinter(), self.notes]
        gc.freeze()  # as in a trial process: each trial's gc.collect() skips the imported modules

    def update_study_note(self) -> None:
        self.notes.update_study_note(self.study)

    def close(self) -> None:
        self.objective.references = None  # nothing on disk: dropping the kept references frees them

    def __call__(self, serial: int, keeper: ClaimKeeper) -> None:
        heartbeat, deadline, bound = StartHeartbeat(self.study), InProcessDeadline(self.space.study.trial_timeout_s), []
        started = functools.partial(self._started, serial, keeper, heartbeat, deadline, bound)
        self.study.sampler = BindOnStart(sampler_for_ticket(self.space, serial), on_start=started)
        guard = GuardedObjective(self.objective, worker=worker_name())
        objective = deadline.until_return(heartbeat.handing_over(guard))
        try:
            with deadline:
                self.study.optimize(objective, n_trials=1, callbacks=self.callbacks, gc_after_trial=True, catch=(Exception,))
        except ClaimLost:
            return
        except TrialTimeout:
            # The trial is still RUNNING (Optuna let the exception through): fail and retry it here.
            fail_crashed_trial(self.study, bound[0], str(deadline.verdict()))
            self.notes(self.study, storage_of(self.study).get_trial(bound[0]))
        except SystemExit as stop:  # SIGTERM or Ctrl-C (`stop_on_signals`), or the workload called sys.exit()
            fail_stopped(self.study, bound[0] if bound else None, stop)
            raise
        finally:
            heartbeat.stop()
        _check_device_usable(guard)

    def _started(
        self, serial: int, keeper: ClaimKeeper, heartbeat, deadline: InProcessDeadline, bound: list, trial_id: int
    ) -> None:
        """The sampled trial is bound to its ticket and beats from now on; its time limit starts."""
        bind_ticket(self.study, self.tickets, serial, trial_id)
        heartbeat.start(trial_id)
        keeper.bound(trial_id)
        bound.append(trial_id)
        deadline.start()


def _check_device_usable(guard: GuardedObjective) -> None:
    if guard.sticky is not None:  # its retry is queued; this process's device cannot run it
        raise TrialsCannotStart(
            f"the device is unusable after a sticky error ({guard.sticky}); trial processes (the default, "
            "without --in-process) replace the process that met one"
        )
