"""Ctrl-C in the terminal of `hpo run` (SIGINT to its whole foreground process group) ends the running
trial as SIGTERM does: FAIL with verdict `interrupted`, its retry queued and its ticket refunded, its
trial process and reference folder gone, nothing left RUNNING, exit 130; on SQLite and PostgreSQL,
with trial processes and in-process."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import pytest
from optuna.trial import TrialState

from hpo.errors import ExitCode
from worker_harness import ROOT, alive, descendants, hpo_env, space_file, tickets, trials, wait_for


def _sigint_at_default() -> None:
    # As a terminal's foreground job has it. A shell without job control starts a background job (and
    # so this suite, and its children) with SIGINT ignored, and hpo then leaves it ignored (see
    # tests/cli/test_exit_codes.py).
    signal.signal(signal.SIGINT, signal.SIG_DFL)


@pytest.mark.slow
@pytest.mark.timeout(300)
@pytest.mark.parametrize("mode", ["trial-process", "in-process"])
@pytest.mark.parametrize("db", ["sqlite", "postgres"])
def test_ctrl_c_fails_the_running_trial_for_a_retry_removes_its_files_and_exits_130(db, mode, tmp_path, request):
    url = f"sqlite:///{tmp_path / 'study.db'}" if db == "sqlite" else request.getfixturevalue("postgres_url")
    temp, log = tmp_path / "tmp", tmp_path / "stderr.txt"
    temp.mkdir()
    # Trains until stopped; a searched knob, so that the worker keeps a reference folder.
    space = space_file(tmp_path, 2, optimizer=["forloop", "foreach"], max_steps=1_000_000, eval_every=2)
    cmd = [sys.executable, "-m", "hpo.app.cli", "run", str(space), "--storage", url]
    with log.open("w") as err:
        run = subprocess.Popen(
            cmd + (["--in-process"] if mode == "in-process" else []),
            env=hpo_env(TMPDIR=str(temp)),
            stdout=subprocess.DEVNULL,
            stderr=err,
            cwd=ROOT,
            start_new_session=True,  # its own process group, as a terminal's foreground job has
            preexec_fn=_sigint_at_default,
        )
    try:
        wait_for(lambda: "trial 0 step 4/" in log.read_text() or run.poll() is not None, timeout=180, what="trial 0 to train")
        assert run.poll() is None, log.read_text()[-3000:]
        folders = list(temp.glob("hpo-reference-*"))
        # A worker with trial processes shares the probe's reference through a folder; an in-process
        # worker keeps it in memory and writes none (hpo.verify.probing._kept_reference.ReferenceMemory).
        assert len(folders) == (1 if mode == "trial-process" else 0), folders
        started = descendants(run.pid)  # the forkserver and the trial process, with trial processes
        os.killpg(run.pid, signal.SIGINT)  # what Ctrl-C does: the whole foreground process group
        run.wait(timeout=120)
    finally:
        if run.poll() is None:
            os.killpg(run.pid, signal.SIGKILL)
            run.wait(timeout=30)
    stderr = log.read_text()
    assert run.returncode == ExitCode.INTERRUPTED == 130, stderr[-3000:]
    assert "hpo: interrupted" in stderr and "Traceback" not in stderr
    interrupted, retry = trials(url)  # nothing RUNNING
    assert interrupted.state == TrialState.FAIL
    assert interrupted.user_attrs["verdict"] == "interrupted: its worker was interrupted (SIGINT, Ctrl-C)"
    assert retry.state == TrialState.WAITING and retry.params == interrupted.params
    assert retry.user_attrs["retry_of"] == interrupted.number
    assert tickets(url) == ((0, 2), 0)  # the retry's ticket is back in the budget
    assert not any(folder.exists() for folder in folders) and list(temp.glob("hpo-reference-*")) == []
    # The trial process is killed before hpo exits; the forkserver (and multiprocessing's resource
    # tracker) exit once their pipes to it close.
    wait_for(lambda: not alive(started), timeout=15, what=f"processes {alive(started)} of hpo run to exit")


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_ctrl_c_under_hpo_run_with_two_workers_fails_each_running_trial_for_a_retry(tmp_path):
    """`hpo run --workers 2`: its worker processes are in the terminal's process group too; each
    fails its own trial, and hpo run waits for them before it exits 130."""
    url = f"sqlite:///{tmp_path / 'study.db'}"
    log = tmp_path / "stderr.txt"
    space = space_file(tmp_path, 2, max_steps=1_000_000, eval_every=2)
    with log.open("w") as err:
        run = subprocess.Popen(
            [sys.executable, "-m", "hpo.app.cli", "run", str(space), "--storage", url, "--workers", "2"],
            env=hpo_env(),
            stdout=subprocess.DEVNULL,
            stderr=err,
            cwd=ROOT,
            start_new_session=True,
            preexec_fn=_sigint_at_default,
        )
    try:
        both = lambda: all(f"trial {n} step 4/" in log.read_text() for n in (0, 1)) or run.poll() is not None
        wait_for(both, timeout=240, what="both trials to train")
        assert run.poll() is None, log.read_text()[-3000:]
        os.killpg(run.pid, signal.SIGINT)
        run.wait(timeout=120)
    finally:
        if run.poll() is None:
            os.killpg(run.pid, signal.SIGKILL)
            run.wait(timeout=30)
    assert run.returncode == ExitCode.INTERRUPTED, log.read_text()[-3000:]
    found = trials(url)
    assert sorted(t.state.name for t in found) == ["FAIL", "FAIL", "WAITING", "WAITING"], [t.state.name for t in found]
    for failed in (t for t in found if t.state == TrialState.FAIL):
        assert failed.user_attrs["verdict"].startswith("interrupted: ")
    assert tickets(url) == ((0, 2), 0)
