"""Run each trial in a fresh child of a forkserver (`ChildTrials`, the default), whose death is
recorded on the trial and retried.

The forkserver has already imported torch and the trial stack, loaded the study's data and built its
model once (`hpo.runtime._forkserver_warmup`), so a child costs a fork rather than a new interpreter.
It starts clean, so this is safe even if the worker has initialised CUDA (plain fork is not).
"""

from __future__ import annotations

import functools
import os
import signal
import threading
import time

import optuna
import sqlalchemy.exc
from optuna.trial import TrialState

from hpo.config.space import SearchSpace
from hpo.hardware import oom_kill_counter
from hpo.logging import get_logger
from hpo.reporting import DashboardNotes
from hpo.runtime._child import run_one_trial
from hpo.runtime._child_watch import ChildWatch
from hpo.runtime._forkserver import start_forkserver
from hpo.runtime._handed import SamplingFailed, TakenOver, ask_in_worker
from hpo.runtime._killed_for_memory import killed_for_memory, record_killed_for_memory
from hpo.runtime._reference_folders import folder_path, reference_folder, remove_folder
from hpo.runtime._runners import TrialsCannotStart, fail_stopped, worker_name
from hpo.runtime._ticket_claims import ClaimKeeper, ClaimLost, StartHeartbeat, bind_ticket, recover
from hpo.storage import TicketBudget, fail_crashed_trial, liveness, storage_of
from hpo.study import space_of
from hpo.verdicts import Kind, Verdict

__all__ = ["ChildTrials", "crash_verdict"]

_log = get_logger(__name__)

# A child that dies this many times in a row before its trial starts means trials cannot start here.
MAX_STARTUP_FAILURES = 3


class ChildTrials:
    """Run each trial in a forkserver child; turn a child's death, a trial over its time limit or
    a trial whose heartbeats stopped into a recorded, retried failure, and kill what is left of it.
    The worker never waits on its child without a limit: it polls, and checks between polls.

    The worker writes each trial's dashboard note when its process has ended (a crashed trial gets
    one too): optuna_dashboard, with optuna.importance and scikit-learn, takes 0.85 s to import, here
    once and in a thread while the forkserver starts, rather than in every trial process."""

    def __init__(self, study: optuna.Study, storage_url: str, space: SearchSpace, tickets: TicketBudget):
        self.study, self.storage_url, self.tickets = study, storage_url, tickets
        self.limit_s = space.study.trial_timeout_s
        self.interval_s, self.grace_s = liveness(storage_of(study))
        self.references = reference_folder(space)
        self.startup_failures = 0
        self.space, self.oom_kills = space, oom_kill_counter()
        self._notes: DashboardNotes | None = None
        self._notes_loading = threading.Thread(target=self._load_notes, name="hpo-load-notes", daemon=True)
        self._notes_loading.start()
        self.context = start_forkserver(space, storage_url)

    def _load_notes(self) -> None:
        self._notes = DashboardNotes()

    @property
    def notes(self) -> DashboardNotes:
        self._notes_loading.join()
        return self._notes

    def update_study_note(self) -> None:
        self.notes.update_study_note(self.study)

    def close(self) -> None:
        remove_folder(self.references)

    def __call__(self, serial: int, keeper: ClaimKeeper) -> None:
        """Ask the sampler here (`hpo.runtime._handed`), then run the trial in a trial process. The
        worker keeps the new trial alive with heartbeats until that process takes it over."""
        heartbeat = StartHeartbeat(self.study)
        started = functools.partial(self._started, serial, heartbeat, keeper)
        try:
            self._ask_and_run(serial, started, heartbeat)
        except ClaimLost:
            return  # the trial is failed and its ticket pays for another one
        except TakenOver as taken:
            _log.warning(f"{taken}: this worker goes on to its next trial")
        except SamplingFailed as failed:  # recorded on the trial, its retry queued, like an error in training
            self.notes(self.study, storage_of(self.study).get_trial(failed.trial_id))
        except (sqlalchemy.exc.SQLAlchemyError, optuna.exceptions.StorageInternalError) as exc:
            if keeper.trial_id is not None:
                raise  # its heartbeats stop: the trial goes stale and is retried
            self._no_trial(serial, Verdict(Kind.CRASHED, f"the worker could not ask for a trial ({type(exc).__name__})"))
        except SystemExit as stop:
            self._stopped(keeper, heartbeat, stop)
            raise
        finally:
            heartbeat.stop()

    def _started(self, serial: int, heartbeat: StartHeartbeat, keeper: ClaimKeeper, trial_id: int) -> None:
        """The sampled trial is bound to its ticket, and beats from the worker until its process takes it."""
        bind_ticket(self.study, self.tickets, serial, trial_id)
        heartbeat.start(trial_id)
        keeper.bound(trial_id)

    def _ask_and_run(self, serial: int, started, heartbeat: StartHeartbeat) -> None:
        trial_id, sampled_s = ask_in_worker(self.study, space_of(self.study), serial, started, worker_name())
        self._run(trial_id, sampled_s, heartbeat)

    def _stopped(self, keeper: ClaimKeeper, heartbeat: StartHeartbeat, stop: SystemExit) -> None:
        """SIGTERM or Ctrl-C (`stop_on_signals`), while sampling or once its process (ended by `_run`)
        ran it: the trial fails now and its retry need not wait for it to go stale."""
        heartbeat.stop()
        fail_stopped(self.study, keeper.trial_id, stop)

    def _run(self, trial_id: int, sampled_s: float, heartbeat: StartHeartbeat) -> None:
        child, here, kills_before = self._start_process(trial_id, sampled_s)
        exited = False
        try:
            watch = ChildWatch(self.limit_s, self.interval_s, self.grace_s, functools.partial(self._trial_ended, trial_id))
            taken, verdict, exited = watch.watch(here, heartbeat)
        finally:  # whatever happened here (SIGTERM and Ctrl-C too), no trial process outlives this call
            _end(child, wait_s=self.grace_s if exited else 0)
            here.close()
        if taken:
            self.startup_failures = 0
        verdict = self._record_end(trial_id, child.exitcode, taken, verdict, kills_before)
        self.notes(self.study, storage_of(self.study).get_trial(trial_id))
        if not taken:  # it died (or hung) before it took its trial: its retry is queued, and it counts
            self._start_failed(verdict)

    def _start_process(self, trial_id: int, sampled_s: float):
        """The trial's process, started; this end of its socket pair; the OOM kills counted before it started."""
        # A socket pair: each side reads EOF when the other process dies, whoever goes first.
        here, there = self.context.Pipe(duplex=True)
        worker, launched_at = worker_name(), time.time()
        args = (
            self.storage_url,
            self.study.study_name,
            trial_id,
            worker,
            there,
            launched_at,
            folder_path(self.references),
            sampled_s,
        )
        child = self.context.Process(target=run_one_trial, args=args)
        kills_before = self.oom_kills.read() if self.oom_kills is not None else None
        child.start()
        there.close()
        return child, here, kills_before

    def _record_end(
        self, trial_id: int, exitcode: int | None, taken: bool, verdict: Verdict | None, kills_before
    ) -> Verdict | None:
        """The trial's failure when its process did not finish it: killed for memory (recorded `oom`,
        not retried: the same parameters need the same memory), else crashed (or the verdict the
        watch gave). Returns the verdict recorded, if any."""
        killed = killed_for_memory(exitcode, self.oom_kills, kills_before) if verdict is None and taken else None
        if killed is not None:
            record_killed_for_memory(self.study, trial_id, killed, self.space)
        elif verdict is None and (exitcode != 0 or not taken):
            verdict = crash_verdict(exitcode, oom_counted=self.oom_kills is not None)
        if verdict is not None:
            fail_crashed_trial(self.study, trial_id, str(verdict))
        return verdict

    def _trial_ended(self, trial_id: int) -> bool:
        """Whether the trial is no longer RUNNING, after failing every stale trial of the study,
        this one included: a trial process that stopped sending heartbeats (hung in C code with
        the GIL held, say) is failed and retried while its worker lives."""
        try:
            recover(self.study, self.tickets)
            return storage_of(self.study).get_trial(trial_id).state != TrialState.RUNNING
        except (sqlalchemy.exc.SQLAlchemyError, optuna.exceptions.StorageInternalError):
            return False  # the database is briefly unreachable: ask again next interval

    def _no_trial(self, serial: int, why: Verdict) -> None:
        self.tickets.release(serial)  # the trial never started: its ticket goes back
        self._start_failed(why)

    def _start_failed(self, why: Verdict) -> None:
        self.startup_failures += 1
        if self.startup_failures >= MAX_STARTUP_FAILURES:
            raise TrialsCannotStart(
                f"{MAX_STARTUP_FAILURES} trial processes in a row ended before their trial started "
                f"(last: {why.detail}); see the errors above, or run `hpo worker --in-process`"
            )


def _end(child, wait_s: float) -> None:
    """Give a trial process `wait_s` to exit, then kill it with every process it started (it
    leads its own process group) and reap it: a SIGKILLed process is gone within moments."""
    child.join(timeout=wait_s)
    if child.exitcode is None:
        for kill in (lambda: os.killpg(child.pid, signal.SIGKILL), child.kill):
            try:
                kill()
            except (ProcessLookupError, PermissionError):
                pass  # already gone, or not yet in its own group
    child.join(timeout=30)


def crash_verdict(exitcode: int | None, oom_counted: bool = False) -> Verdict:
    """Why a trial process died. A SIGKILL is the kernel's OOM killer's or a `kill -9`: with
    `oom_counted`, OOM kills were counted while it ran and none was (`killed_for_memory`)."""
    if exitcode is None:
        return Verdict(Kind.CRASHED, "trial process was killed and had not exited 30 s later")
    if exitcode >= 0:
        return Verdict(Kind.CRASHED, f"trial process died (exit code {exitcode})")
    try:
        name = signal.Signals(-exitcode).name
    except ValueError:
        name = str(-exitcode)
    hint = ""
    if -exitcode == signal.SIGKILL:
        hint = " (kill -9: no OOM kill counted while it ran)" if oom_counted else " (the kernel's OOM killer, or kill -9)"
    return Verdict(Kind.CRASHED, f"trial process died (signal {name}{hint})")
