"""Run `study.strategy: probe_first`'s opening sweep, once per study, and store its decision.

`decide(study, space)` is called by `hpo run` and `hpo worker` before any trial starts. The first
worker to insert the study attr `LOCK_ATTR` (insert-if-absent: atomic in an RDB storage) runs the
sweep of `hpo probe` (`hpo.strategy._sweep`, its verdicts going to the study's verdict cache) with one
timed step a combination, races the verified ones (more steps, interleaved, only for those that
could still be kept; `hpo.strategy._race`), ranks them (`hpo.strategy._ranking`) and stores
the decision under `KEPT_ATTR` (the study note shows it after the worker's first trial). Every other worker waits until the decision is stored and reads it: the sweep never runs
twice. If the sweep fails, its worker stores the failure (`FAILED_ATTR`) and the waiting ones stop
with it; a waiting worker on the same host also sees the sweeping process die. The next `hpo run`
or `hpo worker` then sweeps again under a new lock.
"""

from __future__ import annotations

import os
import socket
import sys
import time
from collections.abc import Callable

import optuna

from hpo.config.space import SearchSpace
from hpo.reporting import KEPT_ATTR, decision_note
from hpo.storage import add_study_user_attr
from hpo.strategy._decision import make_decision
from hpo.strategy._errors import NothingVerified
from hpo.strategy._sweep import sweep
from hpo.strategy._warm_models import WarmModels
from hpo.verify.stored import MachineFacts, StudyVerdicts
from hpo.verify.timing import ONE_STEP

__all__ = ["FAILED_ATTR", "LOCK_ATTR", "decide"]

LOCK_ATTR = "hpo:probe_first:sweeper"  # + ":<attempt>": {"host", "pid", "at"}, who runs the sweep
FAILED_ATTR = "hpo:probe_first:failed:"  # + "<attempt>": {"error"}, why that attempt's sweep failed
WAIT_S = 1.0  # how often a waiting worker reads the study for the decision


def decide(study: optuna.Study, space: SearchSpace, say: Callable[[str], None] | None = None) -> dict | None:
    """The study's probe_first decision (None for `joint`): read, waited for, or made here."""
    if space.study.strategy != "probe_first":
        return None
    say = say or (lambda line: print(line, file=sys.stderr, flush=True))
    decided = None
    while decided is None:
        attempt = sum(k.startswith(FAILED_ATTR) for k in study.user_attrs)  # a failed sweep is retried by a later run
        me = {"host": socket.gethostname(), "pid": os.getpid(), "at": time.time()}
        if add_study_user_attr(study, f"{LOCK_ATTR}:{attempt}", me):
            decided = _sweep_and_store(study, space, attempt, say)
        else:
            decided = _wait(study, attempt, say)
    if not decided["kept"]:
        raise NothingVerified("\n".join(decided["rejected"]))
    return decided


def _wait(study: optuna.Study, attempt: int, say) -> dict | None:
    """The decision once stored; None when the sweeper died on this host (the caller sweeps again)."""
    sweeper = study.user_attrs.get(f"{LOCK_ATTR}:{attempt}") or {}
    if KEPT_ATTR not in study.user_attrs:
        say(f"study {study.study_name!r}: waiting for the knob sweep run by {sweeper.get('host')}:{sweeper.get('pid')}")
    while True:
        attrs = study.user_attrs  # read from the storage each time
        if KEPT_ATTR in attrs:
            return attrs[KEPT_ATTR]
        failed = attrs.get(f"{FAILED_ATTR}{attempt}")
        if failed is not None:
            raise RuntimeError(f"study.strategy probe_first: the sweep failed ({failed['error']}); run again to retry it")
        if sweeper.get("host") == socket.gethostname() and not _alive(sweeper.get("pid")):
            add_study_user_attr(study, f"{FAILED_ATTR}{attempt}", {"error": f"the sweeping process {sweeper.get('pid')} died"})
            return None
        time.sleep(WAIT_S)


def _alive(pid) -> bool:
    try:
        os.kill(int(pid), 0)
    except (OSError, TypeError, ValueError):
        return False
    return True


def _sweep_and_store(study: optuna.Study, space: SearchSpace, attempt: int, say) -> dict:
    try:
        machine = MachineFacts()
        started = time.perf_counter()
        warm = WarmModels()
        try:
            rows = sweep(space, StudyVerdicts(study), machine=machine, memory=False, policy=ONE_STEP, warm=warm)
            decided = {**make_decision(space, rows, space.study.keep_fastest, machine=machine, warm=warm)}
        finally:
            warm.clear()  # nothing of the sweep stays on the device for the trials
        decided["sweep_s"] = time.perf_counter() - started
    except BaseException as exc:  # the waiting workers must learn it, or they would wait forever
        add_study_user_attr(study, f"{FAILED_ATTR}{attempt}", {"error": f"{type(exc).__name__}: {exc}"[:500]})
        raise
    # The study note shows the decision once this worker's first trial ends
    # (`hpo.runtime._workers`): importing optuna_dashboard here took 3 s of a 15 s sweep.
    study.set_user_attr(KEPT_ATTR, decided)
    say(decision_note(decided))
    return decided
