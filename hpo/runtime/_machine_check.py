"""Before a worker's first trial: the searched knob values this machine cannot run
(`hpo.verify.machine._kernel_check`, the check `hpo doctor` shows), each said once on stderr and in the study's
dashboard note, and never proposed by this process (`hpo.study.avoiding_here`).

Workers of one study may sit on different machines, so nothing here changes the study: its search
space stays, no verdict is cached, and a worker on a machine that runs the value proposes it.

The check runs once per process (`hpo run` and its in-process worker share it). The worker itself
never imports torch, so the check runs in a child process: forked from the worker's forkserver,
which its trials use too (torch already imported there, so it costs the check's own time), or
spawned for `hpo run` with several workers. It touches the optional packages and the GPU; a child
keeps a crash of a broken package's import, and the GPU context a kernel run creates, out of the
worker. A worker that runs trials in its own process (`--in-process`) checks in-process.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import json
import multiprocessing
import socket
from collections.abc import Iterator

import optuna

from hpo.config.space import SearchSpace
from hpo.errors import NoKnobsRunHere
from hpo.logging import get_logger
from hpo.reporting import DashboardNotes, machine_attr
from hpo.runtime._forkserver import start_forkserver
from hpo.study import avoiding_here
from hpo.verify.machine import MachineCheck, nothing_left, searched_parts

__all__ = ["NothingRunsHere", "check_machine", "forget_checks", "machine_checked"]

_log = get_logger(__name__)

_CHECKED: dict[tuple[str, str], MachineCheck] = {}  # (systems, device) -> the check, per process


class NothingRunsHere(NoKnobsRunHere):
    """Every knob combination of the space holds a value (or pair) this machine cannot run."""

    def __init__(self, check: MachineCheck):
        self.lines = [n.line() for n in check.not_runnable]
        self.headline = f"no knob combination can run on this machine ({check.device}); not runnable here:"
        super().__init__("\n".join(self.lines))


def check_machine(space: SearchSpace, *, in_child: bool = True, storage_url: str | None = None) -> MachineCheck:
    """The space's values checked on this machine, once per process; the first call says one
    line per value (or pair) that cannot run. `storage_url`: check in a child of the worker's own
    forkserver (started here if it is not yet); without it, in a spawned child."""
    systems, device = space.checked_systems, space.spec.systems.device
    key = (json.dumps(systems, sort_keys=True, default=str), device)
    if key not in _CHECKED:
        check = _run_check(systems, device, in_child, space if storage_url else None, storage_url)
        for row in check.not_runnable:
            _log.warning(f"not proposed on this machine ({check.device}): {row.line()}")
        for line in check.unchecked:
            _log.warning(f"not checked on this machine ({check.device}): {line}")
        _CHECKED[key] = check
    return _CHECKED[key]


def forget_checks() -> None:
    """Forget this process's checks (tests that change what is installed between studies)."""
    _CHECKED.clear()


@contextlib.contextmanager
def machine_checked(study: optuna.Study, space: SearchSpace, storage_url: str, isolate: bool) -> Iterator[MachineCheck]:
    """A worker's start: check this machine, raise NothingRunsHere if nothing is left to propose,
    record it on the study, and avoid its values and pairs in every proposal while inside."""
    check = check_machine(space, in_child=isolate, storage_url=storage_url)
    if nothing_left(space.checked_systems, check.parts()):
        raise NothingRunsHere(check)
    _record(study, check)
    with avoiding_here(searched_parts(space.checked_systems, check.parts())):
        yield check


def check_on(systems: dict, device: str) -> MachineCheck:
    """`hpo.verify.machine.check_values` on the device a space names (`auto`, `cpu`, `cuda:N`).
    A worker hands this function to its child process: the worker imports no torch, the child does."""
    from hpo.hardware import resolve_device
    from hpo.verify.machine import check_values

    return check_values(systems, resolve_device(device))


def _run_check(systems: dict, device: str, in_child: bool, space: SearchSpace | None, storage_url: str | None) -> MachineCheck:
    if not in_child:
        return check_on(systems, device)
    context = start_forkserver(space, storage_url) if space is not None else multiprocessing.get_context("spawn")
    try:
        with concurrent.futures.ProcessPoolExecutor(1, mp_context=context) as pool:
            return pool.submit(check_on, systems, device).result()
    except concurrent.futures.process.BrokenProcessPool as exc:  # a package's import killed the child
        why = f"the check's process died ({exc}); nothing is left out here: each trial's probe judges its knobs"
        return MachineCheck(device=device, unchecked=(why,))


def _record(study: optuna.Study, check: MachineCheck) -> None:
    """Store this machine's lines on the study and refresh its note, only when they changed: a
    note write reads all of the study's system attrs (optuna_dashboard.save_note), and every
    worker start would otherwise pay it."""
    key = machine_attr(socket.gethostname())
    value = {"device": check.device, "lines": [n.line() for n in check.not_runnable]}
    stored = study.user_attrs.get(key)
    if stored == value or (stored is None and not value["lines"]):
        return
    study.set_user_attr(key, value)
    DashboardNotes().update_study_note(study)
