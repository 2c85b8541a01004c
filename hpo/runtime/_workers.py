"""Workers: loops that claim tickets from the study's budget and run one trial per ticket, each
in a fresh forkserver child by default (`hpo.runtime._child_trials`), so a crash, a leak or a poisoned
CUDA context cannot touch later trials."""

from __future__ import annotations

import functools
import os
import signal
import subprocess
import sys
import time

import optuna

from hpo.logging import get_logger
from hpo.reporting import KEPT_ATTR, MODE_ENV, make_display, set_sink
from hpo.runtime._child import die_with_parent
from hpo.runtime._child_trials import ChildTrials
from hpo.runtime._in_process_trials import InProcessTrials
from hpo.runtime._interrupts import stop_on_signals
from hpo.runtime._machine_check import machine_checked
from hpo.runtime._placement import default_workers, gpu_slices, visible_gpus
from hpo.runtime._quiet import quiet_optuna
from hpo.runtime._reference_folders import remove_orphaned_folders
from hpo.runtime._runners import TrialsCannotStart
from hpo.runtime._ticket_claims import ClaimKeeper, has_running, recover, require_budget
from hpo.storage import liveness, storage_of
from hpo.study import open_hpo_study

_log = get_logger(__name__)

STORAGE_ENV = "HPO_STORAGE"  # workers get the URL here, not in argv where `ps` would show a password


def run_workers(
    study: optuna.Study, storage_url: str, workers: int | None, timeout: float | None, isolate: bool, per_trial: int = 1
) -> int:
    """Run `workers` local workers on one study (default: one per `per_trial` visible GPUs, a
    trial's ranks); 1 runs here, more run as `hpo worker` processes, each on its own GPUs.
    Returns how many workers failed."""
    workers = workers or default_workers(per_trial)
    if workers == 1:
        return _run_worker_here(study, storage_url, timeout, isolate)
    cmd = [sys.executable, "-m", "hpo.app.cli", "worker", "--study", study.study_name]
    cmd += ([] if timeout is None else ["--timeout", str(timeout)]) + ([] if isolate else ["--in-process"])
    # A worker dies with this process (SIGTERM), and its trial process with it: no orphan trains on.
    procs = [
        subprocess.Popen(cmd, env=_worker_env(i, workers, storage_url, per_trial), preexec_fn=_die_with_parent)
        for i in range(workers)
    ]
    failed = [(index, code) for index, code in enumerate(_exit_codes(procs)) if code != 0]
    for index, code in failed:
        _log.warning(f"worker {index} exited with code {code}")
    return len(failed)


def _run_worker_here(study: optuna.Study, storage_url: str, timeout: float | None, isolate: bool) -> int:
    """The one worker, in this process: 1 when it failed, else 0."""
    try:
        run_worker(study, storage_url, timeout=timeout, isolate=isolate)
    except TrialsCannotStart as exc:  # as `hpo worker` says it: one line, and this worker failed
        _log.warning(f"worker error: {exc}")
        return 1
    return 0


def _exit_codes(procs: list[subprocess.Popen]) -> list[int]:
    """The worker processes' exit codes, once all have exited."""
    try:
        return [proc.wait() for proc in procs]
    except KeyboardInterrupt:
        # Ctrl-C reached the whole process group (and `kill -INT` only this process): each worker
        # fails its running trial and queues its retry; wait for that, so nothing is left RUNNING.
        for proc in procs:
            proc.send_signal(signal.SIGINT)
        _wait_for(procs, WORKER_STOP_S)
        raise


_die_with_parent = functools.partial(die_with_parent, signal.SIGTERM)
# How long `hpo run` waits for its interrupted worker processes to fail their trials and exit.
WORKER_STOP_S = 60


def _wait_for(procs: list[subprocess.Popen], seconds: float) -> None:
    deadline = time.monotonic() + seconds
    for proc in procs:
        try:
            proc.wait(timeout=max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            _log.warning(f"worker process {proc.pid} had not stopped {seconds:g} s after Ctrl-C; its trial is retried once stale")


def _worker_env(index: int, workers: int, storage_url: str, per_trial: int = 1) -> dict[str, str]:
    """Worker `index`'s environment: its slice of the visible GPUs (`per_trial` of them, as many as
    a trial's ranks; more workers than slices share them in turn), or its share of the CPU cores."""
    env = dict(os.environ, **{STORAGE_ENV: storage_url})
    gpus = visible_gpus()
    slices = gpu_slices(gpus, per_trial)
    if gpus:
        # With fewer GPUs than a trial's ranks there is no slice: the worker sees them all, and
        # each trial refuses itself naming the count (`hpo.trial._ranks`).
        if slices:
            env["CUDA_VISIBLE_DEVICES"] = slices[index % len(slices)]
    elif "OMP_NUM_THREADS" not in env:
        # CPU workers share the cores instead of each spawning a thread per core.
        env["OMP_NUM_THREADS"] = str(max(1, (os.cpu_count() or 1) // workers))
    env[MODE_ENV] = "lines"  # workers share one terminal: one bar each would overwrite each other
    return env


def run_worker(study: optuna.Study, storage_url: str, timeout: float | None = None, isolate: bool = True) -> int:
    """Claim tickets and run trials until the budget is spent and no trial is left running or
    starting anywhere (any of them may still die and need a retry). Returns trials run here.
    SIGTERM (how Slurm and Kubernetes stop a job) and Ctrl-C end it cleanly (`stop_on_signals`):
    `Stopped` (SystemExit 143 or 130) is raised, its trial process is killed, its trial failed
    (`terminated` / `interrupted`) and queued for a retry, and its reference folder removed.
    Knob values this machine cannot run are never proposed here (`machine_checked`); if nothing is
    left, `NothingRunsHere` is raised before any trial."""
    quiet_optuna()
    remove_orphaned_folders()  # left by workers on this host that were killed outright
    study, space = open_hpo_study(storage_of(study), study.study_name)  # the space's sampler and pruner
    tickets = require_budget(study)
    claimed, budget = tickets.state()
    set_sink(make_display(budget, claimed, study.directions[0] == optuna.study.StudyDirection.MINIMIZE))
    timeout = timeout if timeout is not None else space.study.timeout
    with machine_checked(study, space, storage_url, isolate), stop_on_signals():
        run_one = ChildTrials(study, storage_url, space, tickets) if isolate else InProcessTrials(study, space, tickets)
        try:
            return _claim_and_run(study, tickets, run_one, timeout)
        finally:
            run_one.close()


def _claim_and_run(study: optuna.Study, tickets, run_one, timeout: float | None) -> int:
    pause = liveness(storage_of(study))[0] / 2
    deadline = None if timeout is None else time.monotonic() + timeout
    ran = 0
    while deadline is None or time.monotonic() < deadline:
        recover(study, tickets)
        serial = tickets.claim()
        if serial is not None:
            _run_ticket(study, tickets, run_one, serial, first=ran == 0)
            ran += 1
        elif has_running(study) or tickets.pending():
            time.sleep(pause)
        else:
            break
    if ran:
        run_one.update_study_note()  # the final knob-effect table, whatever N divides
    return ran


def _run_ticket(study: optuna.Study, tickets, run_one, serial: int, first: bool) -> None:
    """Run the trial of the claimed ticket `serial`, the ticket kept claimed while it runs."""
    with ClaimKeeper(study, tickets, serial) as keeper:
        run_one(serial, keeper)
    if first and KEPT_ATTR in study.user_attrs:
        # probe_first's decision heads the study note: shown after this worker's first trial,
        # not written by the sweep, which would pay optuna_dashboard's import before any trial.
        run_one.update_study_note()
