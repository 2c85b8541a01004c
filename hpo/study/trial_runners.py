"""How a worker runs one trial: in its own process (`InProcessTrials`), or in a fresh child of a
forkserver (`ChildTrials`, the default) whose death is recorded on the trial and retried.

The forkserver has already imported torch and the trial stack, loaded the study's data and built its
model once (`hpo.study.forkserver_warmup`), so a child costs a fork rather than a new interpreter.
It starts clean, so this is safe even if the worker has initialised CUDA (plain fork is not).
"""

from __future__ import annotations

import gc
import os
import signal
import socket
import tempfile
import threading
import time

import optuna

from hpo.config.space import SearchSpace
from hpo.storage.optuna_compat import storage_of
from hpo.storage.retry import fail_crashed_trial
from hpo.storage.tickets import TicketBudget
from hpo.study.budget import BindOnStart, ClaimKeeper, bind_ticket
from hpo.study.child import GuardedObjective, run_one_trial, sampler_for_ticket
from hpo.study.notes import DashboardNotes
from hpo.study.progress import TrialPrinter, report
from hpo.study.trial_server import start_trial_server
from hpo.verdicts import Kind, Verdict

__all__ = ["ChildTrials", "InProcessTrials", "crash_verdict", "reference_folder", "worker_name"]

# A child that dies this many times in a row before its trial starts means trials cannot start here.
MAX_STARTUP_FAILURES = 3


def worker_name() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


def reference_folder(space: SearchSpace) -> tempfile.TemporaryDirectory | None:
    """The worker's folder for its probes' reference steps (`hpo.verify.compared`), removed when
    the worker ends; None when the space fixes every systems knob: each model is then probed once,
    and nothing would read the files."""
    if all(len(choices) == 1 for choices in space.systems.values()):
        return None
    return tempfile.TemporaryDirectory(prefix="hpo-reference-")


def _name(folder: tempfile.TemporaryDirectory | None) -> str | None:
    return None if folder is None else folder.name


class InProcessTrials:
    def __init__(self, study: optuna.Study, space: SearchSpace, tickets: TicketBudget):
        from hpo.study.objective import Objective  # imports torch

        self.study, self.space, self.tickets = study, space, tickets
        self.references = reference_folder(space)
        self.objective = Objective(space, reference_dir=_name(self.references))
        self.notes = DashboardNotes()
        self.callbacks = [TrialPrinter(), self.notes]
        gc.freeze()  # as in a trial process: each trial's gc.collect() skips the imported modules

    def update_study_note(self) -> None:
        self.notes.update_study_note(self.study)

    def __call__(self, serial: int, keeper: ClaimKeeper) -> None:
        def started(trial_id: int) -> None:
            bind_ticket(self.study, self.tickets, serial, trial_id)
            keeper.bound(trial_id)

        self.study.sampler = BindOnStart(sampler_for_ticket(self.space, serial), on_start=started)
        self.study.optimize(
            GuardedObjective(self.objective, worker=worker_name()),
            n_trials=1,
            callbacks=self.callbacks,
            gc_after_trial=True,
            catch=(Exception,),
        )


class ChildTrials:
    """Run each trial in a forkserver child; turn a child's death into a recorded, retried failure.
    The worker writes each trial's dashboard note when its process has ended (a crashed trial gets
    one too): optuna_dashboard, with optuna.importance and scikit-learn, takes 0.85 s to import, here
    once and in a thread while the forkserver starts, rather than in every trial process."""

    def __init__(self, study: optuna.Study, storage_url: str, space: SearchSpace, tickets: TicketBudget):
        self.study, self.storage_url, self.tickets = study, storage_url, tickets
        self.references = reference_folder(space)
        self.startup_failures = 0
        self._notes: DashboardNotes | None = None
        self._notes_loading = threading.Thread(target=self._load_notes, name="hpo-load-notes", daemon=True)
        self._notes_loading.start()
        self.context = start_trial_server(space, storage_url)

    def _load_notes(self) -> None:
        self._notes = DashboardNotes()

    @property
    def notes(self) -> DashboardNotes:
        self._notes_loading.join()
        return self._notes

    def update_study_note(self) -> None:
        self.notes.update_study_note(self.study)

    def __call__(self, serial: int, keeper: ClaimKeeper) -> None:
        # A socket pair: each side reads EOF when the other process dies, whoever goes first.
        here, there = self.context.Pipe(duplex=True)
        args = (self.storage_url, self.study.study_name, serial, worker_name(), there, time.time(), _name(self.references))
        child = self.context.Process(target=run_one_trial, args=args)
        child.start()
        there.close()
        try:
            trial_id = here.recv()  # sent as soon as the trial exists
        except EOFError:  # the child died before that
            trial_id = None
        else:
            keeper.bound(trial_id)
            _relay_progress(here)
        child.join()
        here.close()
        if trial_id is None:
            self._no_trial(serial, child.exitcode)
            return
        self.startup_failures = 0
        if child.exitcode != 0:
            fail_crashed_trial(self.study, trial_id, str(crash_verdict(child.exitcode)))
        self.notes(self.study, storage_of(self.study).get_trial(trial_id))

    def _no_trial(self, serial: int, exitcode: int) -> None:
        self.tickets.release(serial)  # the trial never started: its ticket goes back
        self.startup_failures += 1
        if self.startup_failures >= MAX_STARTUP_FAILURES:
            raise RuntimeError(
                f"{MAX_STARTUP_FAILURES} trial processes in a row ended before their trial started "
                f"(last: {crash_verdict(exitcode).detail}); see the errors above, or run `hpo worker --in-process`"
            )


def _relay_progress(conn) -> None:
    """Pass the child's progress events to this process's display until the child exits."""
    while True:
        try:
            report(conn.recv())
        except EOFError:
            return


def crash_verdict(exitcode: int) -> Verdict:
    if exitcode >= 0:
        return Verdict(Kind.CRASHED, f"trial process died (exit code {exitcode})")
    try:
        name = signal.Signals(-exitcode).name
    except ValueError:
        name = str(-exitcode)
    hint = " (the kernel's OOM killer, or kill -9)" if -exitcode == signal.SIGKILL else ""
    return Verdict(Kind.CRASHED, f"trial process died (signal {name}{hint})")
