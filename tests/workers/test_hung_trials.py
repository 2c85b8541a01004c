"""A hung trial ends and the study still spends its budget exactly: at `study.trial_timeout_s` (in
a trial process, on SQLite and PostgreSQL, and in-process), and, without a limit, as soon as its
process stops sending heartbeats, although its worker lives. Heartbeats are 1 s and the grace
period 3 s here (worker_harness)."""

from __future__ import annotations

import os
import signal

import pytest
from optuna.trial import TrialState

from hpo.storage import UNFINISHED
from worker_harness import alive, create_study, hpo, kill_group, space_file, start_worker, tickets, trials, wait_for

CRASHY = "crashy_workloads:Crashy"
LIMIT_S = 12  # a toy trial takes a second or two (more on a loaded machine); the hang, 120 s


def _assert_hung_trial_failed_and_retried(url: str, n_trials: int, verdict_start: str) -> None:
    found = trials(url)
    states = [t.state.name for t in found]
    assert len(found) == n_trials + 1 and states.count("FAIL") == 1 and states.count("COMPLETE") == n_trials, states
    (hung,) = [t for t in found if t.state == TrialState.FAIL]
    assert hung.user_attrs["verdict"].startswith(verdict_start), hung.user_attrs["verdict"]
    (retry,) = [t for t in found if t.user_attrs.get("retry_of") == hung.number]
    assert retry.state == TrialState.COMPLETE and retry.params == hung.params
    assert retry.user_attrs["previous_verdict"] == hung.user_attrs["verdict"]
    assert tickets(url) == ((n_trials, n_trials), 0)  # the retry's ticket was refunded: none spent twice


@pytest.mark.slow
@pytest.mark.timeout(300)
@pytest.mark.parametrize("storage_url", ["sqlite", "postgres"], indirect=True)
def test_a_trial_over_its_time_limit_is_killed_failed_and_retried(storage_url, tmp_path):
    space = space_file(
        tmp_path, n_trials=3, workload=CRASHY, misbehave="hang", once=str(tmp_path / "hung"), trial_timeout_s=LIMIT_S
    )
    run = hpo("run", space, "--storage", storage_url, timeout=240)
    assert run.returncode == 0, run.stderr[-3000:]
    _assert_hung_trial_failed_and_retried(storage_url, 3, f"timeout: trial exceeded study.trial_timeout_s={LIMIT_S} after ")
    hung_pid = int((tmp_path / "hung").read_text())
    assert not alive({hung_pid})
    assert "retrying with the same parameters (retry 1 of 2)" in run.stderr


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_in_process_a_python_level_hang_is_ended_at_the_limit_and_retried(tmp_path):
    url = f"sqlite:///{tmp_path / 'study.db'}"
    space = space_file(
        tmp_path, n_trials=2, workload=CRASHY, misbehave="hang", once=str(tmp_path / "hung"), trial_timeout_s=LIMIT_S
    )
    run = hpo("run", space, "--storage", url, "--in-process", timeout=240)
    assert run.returncode == 0, run.stderr[-3000:]
    _assert_hung_trial_failed_and_retried(url, 2, f"timeout: trial exceeded study.trial_timeout_s={LIMIT_S} after ")


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_trial_process_that_stops_reporting_is_not_kept_alive_by_its_live_worker(tmp_path):
    """No time limit; the trial process is frozen (SIGSTOP: as a hang in C code holding the GIL,
    its heartbeat thread stops too). Its worker fails it once stale, kills it, runs the retry and
    finishes the budget by itself."""
    url = f"sqlite:///{tmp_path / 'study.db'}"
    marker = tmp_path / "hung"
    create_study(space_file(tmp_path, n_trials=2, workload=CRASHY, misbehave="hang", once=str(marker)), url)
    worker = start_worker(url, log=tmp_path / "worker.log")
    try:
        hung_pid = int(wait_for(lambda: marker.exists() and marker.read_text(), timeout=120, what="a trial to hang"))
        os.kill(hung_pid, signal.SIGSTOP)
        assert worker.wait(timeout=120) == 0, (tmp_path / "worker.log").read_text()[-3000:]
    finally:
        if worker.poll() is None:
            kill_group(worker)
    assert not alive({hung_pid})
    _assert_hung_trial_failed_and_retried(url, 2, UNFINISHED)


@pytest.mark.parametrize("value", [0, -5])
def test_a_time_limit_must_be_positive(tmp_path, value):
    run = hpo("validate", space_file(tmp_path, 1, trial_timeout_s=value))
    assert run.returncode == 2 and "study.trial_timeout_s: Input should be greater than 0" in run.stderr
