"""Workers: loops that claim tickets from the study's budget and run one trial per ticket.

By default each trial runs in a fresh child process from a forkserver that has already imported
torch, so a crash, a leak or a poisoned CUDA context cannot touch later trials, and a child costs a
fork rather than a new interpreter. The forkserver starts clean, so this is safe even if the
worker has initialised CUDA (plain fork is not).
"""

from __future__ import annotations

import multiprocessing
import os
import signal
import subprocess
import sys
import time

import optuna
from optuna.storages import fail_stale_trials
from optuna.trial import TrialState

from hpo.execution.budget import has_running, tickets_of
from hpo.execution.child import run_one_trial
from hpo.execution.objective import Objective
from hpo.execution.study import space_of
from hpo.progress import TrialPrinter
from hpo.storage.open import HEARTBEAT_INTERVAL_S

STORAGE_ENV = "HPO_STORAGE"  # workers get the URL here, not in argv where `ps` would show a password


def default_workers() -> int:
    import torch

    return max(1, torch.cuda.device_count()) if torch.cuda.is_available() else 1


def run_workers(study: optuna.Study, storage_url: str, workers: int | None, timeout: float | None, isolate: bool) -> None:
    """Run `workers` local workers on one study; 1 runs here, more run as `hpo worker` processes."""
    workers = workers or default_workers()
    if workers == 1:
        run_worker(study, storage_url, timeout=timeout, isolate=isolate)
        return
    gpus = _visible_gpus()
    procs = []
    for index in range(workers):
        env = dict(os.environ, **{STORAGE_ENV: storage_url})
        if gpus:
            env["CUDA_VISIBLE_DEVICES"] = gpus[index % len(gpus)]
        cmd = [sys.executable, "-m", "hpo.cli", "worker", "--study", study.study_name]
        cmd += ([] if timeout is None else ["--timeout", str(timeout)]) + ([] if isolate else ["--in-process"])
        procs.append(subprocess.Popen(cmd, env=env))
    try:
        for proc in procs:
            proc.wait()
    except KeyboardInterrupt:
        for proc in procs:
            proc.send_signal(signal.SIGINT)
        raise


def _visible_gpus() -> list[str]:
    import torch

    if not torch.cuda.is_available():
        return []
    listed = os.environ.get("CUDA_VISIBLE_DEVICES")
    return listed.split(",") if listed else [str(i) for i in range(torch.cuda.device_count())]


def run_worker(study: optuna.Study, storage_url: str, timeout: float | None = None, isolate: bool = True) -> int:
    """Claim tickets and run trials until the budget is spent and no trial is left running."""
    tickets = tickets_of(study)
    run_one = ChildTrials(storage_url, study.study_name) if isolate else InProcessTrials(study)
    deadline = None if timeout is None else time.monotonic() + timeout
    ran = 0
    while deadline is None or time.monotonic() < deadline:
        fail_stale_trials(study)  # a dead worker's trial becomes a retry waiting for a ticket
        if tickets.claim():
            run_one()
            ran += 1
        elif has_running(study):
            time.sleep(HEARTBEAT_INTERVAL_S / 2)  # it may still die and need a retry
        else:
            break
    return ran


class InProcessTrials:
    def __init__(self, study: optuna.Study):
        self.study, self.objective = study, Objective(space_of(study))
        self.printer = TrialPrinter(tickets_of(study).state()[1])

    def __call__(self) -> None:
        self.study.optimize(self.objective, n_trials=1, callbacks=[self.printer], gc_after_trial=True, catch=(Exception,))


class ChildTrials:
    """Run each trial in a forkserver child; turn a child's death into a recorded, retried failure."""

    def __init__(self, storage_url: str, study_name: str):
        self.storage_url, self.study_name = storage_url, study_name
        self.context = multiprocessing.get_context("forkserver")
        self.context.set_forkserver_preload(["torch", "optuna", "hpo.execution.child"])

    def __call__(self) -> None:
        receiver, sender = self.context.Pipe(duplex=False)
        child = self.context.Process(target=run_one_trial, args=(self.storage_url, self.study_name, sender))
        child.start()
        sender.close()
        trial_id = _poll_trial_id(receiver)
        child.join()
        if child.exitcode != 0 and trial_id is not None:
            record_crash(self.storage_url, self.study_name, trial_id, child.exitcode)


def _poll_trial_id(receiver) -> int | None:
    try:
        return receiver.recv()
    except EOFError:
        return None


def record_crash(storage_url: str, study_name: str, trial_id: int, exitcode: int) -> None:
    from hpo.storage.open import open_storage

    storage = open_storage(storage_url)
    study = optuna.load_study(study_name=study_name, storage=storage)
    cause = f"signal {signal.Signals(-exitcode).name}" if exitcode < 0 else f"exit code {exitcode}"
    if storage.get_trial(trial_id).state != TrialState.RUNNING:
        return  # the child finished its trial before dying
    storage.set_trial_user_attr(trial_id, "verdict", f"crashed: trial process died ({cause})")
    if storage.set_trial_state_values(trial_id, TrialState.FAIL):
        storage.failed_trial_callback(study, storage.get_trial(trial_id))
