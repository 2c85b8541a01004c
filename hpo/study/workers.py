"""Workers: loops that claim tickets from the study's budget and run one trial per ticket.

By default each trial runs in a fresh child process from a forkserver that has already imported
torch and the workload, so a crash, a leak or a poisoned CUDA context cannot touch later trials,
and a child costs a fork rather than a new interpreter. The forkserver has also loaded the study's
data and built its model once (`hpo.study.forkserver_warmup`), so a child finds them ready. The
forkserver starts clean, so this is safe even if the worker has initialised CUDA (plain fork is not).
"""

from __future__ import annotations

import functools
import gc
import multiprocessing
import multiprocessing.forkserver
import os
import signal
import socket
import subprocess
import sys
import threading
import time

import optuna
import sqlalchemy

from hpo.config.space import SearchSpace
from hpo.storage.optuna_compat import liveness, storage_of
from hpo.storage.retry import fail_crashed_trial
from hpo.storage.tickets import TicketBudget
from hpo.study.budget import BindOnStart, ClaimKeeper, bind_ticket, has_running, recover, require_budget
from hpo.study.child import GuardedObjective, die_with_parent, run_one_trial, sampler_for_ticket
from hpo.study.create import open_hpo_study
from hpo.study.forkserver_warmup import WARMUP_ENV, warmup_env
from hpo.study.notes import DashboardNotes
from hpo.study.progress import MODE_ENV, TrialPrinter, make_display, report, set_sink
from hpo.study.quiet import quiet_optuna
from hpo.verdicts import Kind, Verdict
from hpo.workloads.registry import BUILTIN_WORKLOADS

STORAGE_ENV = "HPO_STORAGE"  # workers get the URL here, not in argv where `ps` would show a password
# A child that dies this many times in a row before its trial starts means trials cannot start here.
MAX_STARTUP_FAILURES = 3
# Imported once in the forkserver rather than in every trial process: torch and torch._dynamo (the
# trainer and profiler import it lazily: about 4 s a child otherwise), and what opening an Optuna
# storage imports lazily (alembic, the ORM, Optuna's models: about 0.5 s a child otherwise).
PRELOAD = [
    "torch",
    "torch._dynamo",
    "torch.profiler._cupti_monitor",
    "optuna",
    "optuna.storages._rdb.models",
    "alembic.migration",
    "sqlalchemy.orm",
    "hpo.study.child",
    "hpo.study.objective",  # the trial stack; the worker itself never imports torch
]


def default_workers() -> int:
    """One worker per visible GPU; on CPU one, since a trial's kernels already use every core."""
    if not os.path.exists("/proc/driver/nvidia") and not os.path.exists("/dev/kfd"):
        return 1  # no NVIDIA or AMD GPU driver on this Linux host: no GPU, and no torch import (1 s) to say so
    import torch

    return max(1, torch.cuda.device_count()) if torch.cuda.is_available() else 1


def run_workers(study: optuna.Study, storage_url: str, workers: int | None, timeout: float | None, isolate: bool) -> int:
    """Run `workers` local workers on one study; 1 runs here, more run as `hpo worker` processes.
    Returns how many workers failed."""
    workers = workers or default_workers()
    if workers == 1:
        run_worker(study, storage_url, timeout=timeout, isolate=isolate)
        return 0
    cmd = [sys.executable, "-m", "hpo.app.cli", "worker", "--study", study.study_name]
    cmd += ([] if timeout is None else ["--timeout", str(timeout)]) + ([] if isolate else ["--in-process"])
    # A worker dies with this process (SIGTERM), and its trial process with it: no orphan trains on.
    procs = [subprocess.Popen(cmd, env=_worker_env(i, workers, storage_url), preexec_fn=_die_with_parent) for i in range(workers)]
    try:
        codes = [proc.wait() for proc in procs]
    except KeyboardInterrupt:
        for proc in procs:
            proc.send_signal(signal.SIGINT)
        raise
    failed = [(index, code) for index, code in enumerate(codes) if code != 0]
    for index, code in failed:
        print(f"worker {index} exited with code {code}", file=sys.stderr)
    return len(failed)


_die_with_parent = functools.partial(die_with_parent, signal.SIGTERM)


def _worker_env(index: int, workers: int, storage_url: str) -> dict[str, str]:
    env = dict(os.environ, **{STORAGE_ENV: storage_url})
    gpus = _visible_gpus()
    if gpus:
        env["CUDA_VISIBLE_DEVICES"] = gpus[index % len(gpus)]
    elif "OMP_NUM_THREADS" not in env:
        # CPU workers share the cores instead of each spawning a thread per core.
        env["OMP_NUM_THREADS"] = str(max(1, (os.cpu_count() or 1) // workers))
    env[MODE_ENV] = "lines"  # workers share one terminal: one bar each would overwrite each other
    return env


def _visible_gpus() -> list[str]:
    import torch

    if not torch.cuda.is_available():
        return []
    listed = os.environ.get("CUDA_VISIBLE_DEVICES")
    return listed.split(",") if listed else [str(i) for i in range(torch.cuda.device_count())]


def run_worker(study: optuna.Study, storage_url: str, timeout: float | None = None, isolate: bool = True) -> int:
    """Claim tickets and run trials until the budget is spent and no trial is left running or
    starting anywhere (any of them may still die and need a retry). Returns trials run here."""
    quiet_optuna()
    study, space = open_hpo_study(storage_of(study), study.study_name)  # the space's sampler and pruner
    tickets = require_budget(study)
    claimed, budget = tickets.state()
    set_sink(make_display(budget, claimed, study.directions[0] == optuna.study.StudyDirection.MINIMIZE))
    timeout = timeout if timeout is not None else space.study.timeout
    run_one = ChildTrials(study, storage_url, space, tickets) if isolate else InProcessTrials(study, space, tickets)
    pause = liveness(storage_of(study))[0] / 2
    deadline = None if timeout is None else time.monotonic() + timeout
    ran = 0
    while deadline is None or time.monotonic() < deadline:
        recover(study, tickets)
        serial = tickets.claim()
        if serial is not None:
            with ClaimKeeper(study, tickets, serial) as keeper:
                run_one(serial, keeper)
            ran += 1
        elif has_running(study) or tickets.pending():
            time.sleep(pause)
        else:
            break
    if ran:
        run_one.update_study_note()  # the final knob-effect table, whatever N divides
    return ran


def worker_name() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


class InProcessTrials:
    def __init__(self, study: optuna.Study, space: SearchSpace, tickets: TicketBudget):
        from hpo.study.objective import Objective  # imports torch

        self.study, self.space, self.tickets = study, space, tickets
        self.objective = Objective(space)
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
        self.startup_failures = 0
        self._notes: DashboardNotes | None = None
        self._notes_loading = threading.Thread(target=self._load_notes, name="hpo-load-notes", daemon=True)
        self._notes_loading.start()
        self.context = multiprocessing.get_context("forkserver")
        warmup = ["hpo.study.forkserver_warmup"]
        self.context.set_forkserver_preload([*PRELOAD, _workload_module(space), *_driver_modules(storage_url), *warmup])
        # Started now, so its warm-up overlaps the worker's own start; the study's workload reaches it
        # through its environment, and only its (a forkserver already running keeps its warm-up).
        os.environ[WARMUP_ENV] = warmup_env(space)
        try:
            multiprocessing.forkserver.ensure_running()
        finally:
            del os.environ[WARMUP_ENV]

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
        args = (self.storage_url, self.study.study_name, serial, worker_name(), there, time.time())
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


def _driver_modules(storage_url: str) -> list[str]:
    """The SQLAlchemy dialect and database driver a storage URL needs (a name that is no module,
    such as SQLite's "pysqlite", is skipped by the forkserver)."""
    url = sqlalchemy.engine.make_url(storage_url)
    return [url.get_dialect().__module__, url.get_driver_name()]


def _workload_module(space: SearchSpace) -> str:
    name = space.spec.workload.name
    return BUILTIN_WORKLOADS.get(name, name).partition(":")[0]


def crash_verdict(exitcode: int) -> Verdict:
    if exitcode >= 0:
        return Verdict(Kind.CRASHED, f"trial process died (exit code {exitcode})")
    try:
        name = signal.Signals(-exitcode).name
    except ValueError:
        name = str(-exitcode)
    hint = " (the kernel's OOM killer, or kill -9)" if -exitcode == signal.SIGKILL else ""
    return Verdict(Kind.CRASHED, f"trial process died (signal {name}{hint})")
