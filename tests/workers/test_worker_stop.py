"""A worker stopped with SIGTERM (how Slurm and Kubernetes stop jobs) exits 143 and leaves neither
its trial process nor its reference folder behind; a later worker removes the folders of workers
that died outright; `hpo worker` exits non-zero when it could not run its trials."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys

import optuna
import pytest
import sqlalchemy.exc
from optuna.trial import TrialState

from hpo.app import cli
from hpo.errors import ExitCode
from hpo.runtime import TrialsCannotStart
from hpo.runtime import _workers as workers
from hpo.runtime._reference_folders import remove_orphaned_folders
from worker_harness import ROOT, STUDY, alive, create_study, hpo_env, kill_group, space_file, tickets, trials, wait_for

CRASHY = "crashy_workloads:Crashy"


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_sigterm_ends_the_worker_with_143_its_trial_process_and_its_reference_folder(tmp_path):
    url = f"sqlite:///{tmp_path / 'study.db'}"
    marker, temp = tmp_path / "hung", tmp_path / "tmp"
    temp.mkdir()
    # A searched knob, so that the worker keeps a reference folder.
    space = space_file(tmp_path, 2, workload=CRASHY, misbehave="hang", once=str(marker), optimizer=["forloop", "foreach"])
    create_study(space, url)
    worker = subprocess.Popen(
        [sys.executable, "-m", "hpo.app.cli", "worker", "--study", STUDY],
        env=hpo_env(HPO_STORAGE=url, TMPDIR=str(temp)),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        cwd=ROOT,
        start_new_session=True,
    )
    try:
        hung_pid = int(wait_for(lambda: marker.exists() and marker.read_text(), timeout=120, what="a trial to hang"))
        (folder,) = temp.glob("hpo-reference-*")
        assert folder.name.startswith(f"hpo-reference-{socket.gethostname()}-{worker.pid}-")
        worker.send_signal(signal.SIGTERM)
        _, err = worker.communicate(timeout=60)
    finally:
        if worker.poll() is None:
            kill_group(worker)
    assert worker.returncode == ExitCode.TERMINATED == 143, err[-3000:]
    assert "SIGTERM" in err and "Traceback" not in err
    assert not folder.exists() and not alive({hung_pid})
    # Its trial is failed and queued for a retry at once, rather than after going stale.
    (stopped,) = [t for t in trials(url) if t.state == TrialState.FAIL]
    assert stopped.user_attrs["verdict"] == "terminated: its worker was stopped by SIGTERM"
    (retry,) = [t for t in trials(url) if t.state == TrialState.WAITING]
    assert retry.params == stopped.params
    assert tickets(url) == ((0, 2), 0)  # the retry's ticket is back in the budget


def test_orphaned_reference_folders_of_dead_processes_are_removed_and_live_ones_kept(tmp_path):
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    host = socket.gethostname()
    folders = {
        "dead": tmp_path / f"hpo-reference-{host}-{dead.pid}-abc_12",
        "live": tmp_path / f"hpo-reference-{host}-{os.getpid()}-def34",
        "other host": tmp_path / f"hpo-reference-elsewhere-{dead.pid}-ghi56",
        "no owner": tmp_path / "hpo-reference-jkl78",  # `hpo probe`'s, or an older hpo's
    }
    for folder in folders.values():
        folder.mkdir()
        (folder / "reference.pt").write_bytes(b"x")
    assert remove_orphaned_folders(tmp_path) == [folders["dead"]]
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(f.name for k, f in folders.items() if k != "dead")


@pytest.mark.parametrize(
    ("error", "code", "says"),
    [
        (
            TrialsCannotStart("3 trial processes in a row ended before their trial started"),
            ExitCode.WORKER_FAILED,
            "ended before their trial",
        ),
        (sqlalchemy.exc.OperationalError("SELECT 1", {}, Exception("connection refused")), 3, "the storage failed"),
        (optuna.exceptions.StorageInternalError("An exception is raised during the commit."), 3, "the storage failed"),
    ],
)
def test_hpo_worker_exits_non_zero_when_it_could_not_run_its_trials(tmp_path, monkeypatch, capsys, error, code, says):
    url = f"sqlite:///{tmp_path / 'study.db'}"
    create_study(space_file(tmp_path, 1), url)

    def run_worker(*args, **kwargs):
        raise error

    monkeypatch.setattr(workers, "run_worker", run_worker)
    assert cli.main(["worker", "--study", STUDY, "--storage", url]) == code
    err = capsys.readouterr().err
    assert says in err and len(err.strip().splitlines()) == 1
