"""A trial process that dies becomes a recorded failure with its cause and is retried with the same
parameters; a worker killed mid-trial loses nothing; a study whose workers all died finishes its
budget when resumed. Heartbeats are 1 s and the grace period 3 s here (HPO_HEARTBEAT_INTERVAL,
HPO_GRACE_PERIOD), so a killed worker's trial is failed within seconds."""

from __future__ import annotations

import optuna
import pytest
from optuna.trial import TrialState
from optuna_dashboard._note import get_note_from_system_attrs

from hpo.hardware import oom_kill_counter
from hpo.records import check_trial_attrs
from hpo.storage import storage_of, study_id_of, trial_id_of
from worker_harness import (
    STUDY,
    alive,
    create_study,
    descendants,
    hpo,
    kill_group,
    space_file,
    start_worker,
    tickets,
    trials,
    wait_for,
)

CRASHY = "crashy_workloads:Crashy"


def _states(found) -> list[str]:
    return [t.state.name for t in found]


def _assert_budget_spent_exactly(storage_url: str, n_trials: int, found) -> None:
    """Every ticket claimed and bound to a trial, nothing left running or waiting, and exactly
    `n_trials` trials complete (a crashed trial's retry took its ticket back)."""
    assert tickets(storage_url) == ((n_trials, n_trials), 0)
    assert not [t for t in found if t.state in (TrialState.RUNNING, TrialState.WAITING)], _states(found)
    assert len([t for t in found if t.state == TrialState.COMPLETE]) == n_trials, _states(found)


def _retry_of(trial, found):
    (retry,) = [t for t in found if t.system_attrs.get("retry_history", [])[-1:] == [trial.number]]
    return retry


@pytest.mark.slow
def test_trial_process_that_segfaults_is_recorded_and_retried_with_same_params(tmp_path):
    url = f"sqlite:///{tmp_path / 'study.db'}"
    space = space_file(
        tmp_path, n_trials=2, workload=CRASHY, misbehave="signal", signal="SIGSEGV", once=str(tmp_path / "crashed-once")
    )
    run = hpo("run", space, "--storage", url)
    assert run.returncode == 0, run.stderr[-3000:]
    found = trials(url)
    assert _states(found) == ["FAIL", "COMPLETE", "COMPLETE"]
    crashed = found[0]
    assert crashed.user_attrs["verdict"] == "crashed: trial process died (signal SIGSEGV)"
    retry = _retry_of(crashed, found)
    assert retry.params == crashed.params and retry.user_attrs["retry_of"] == crashed.number
    assert retry.user_attrs["verdict"] == "ok"
    for t in found:  # the crashed trial, its retry and the rest: all within the one record schema
        check_trial_attrs(t.user_attrs)
    assert "retrying with the same parameters (retry 1 of 2)" in run.stderr
    _assert_budget_spent_exactly(url, 2, found)
    # The worker writes each trial's dashboard note once its process ends, the crashed one's too.
    study = optuna.load_study(study_name=STUDY, storage=url)
    attrs = storage_of(study).get_study_system_attrs(study_id_of(study))
    assert get_note_from_system_attrs(attrs, trial_id_of(crashed))["body"].startswith(f"## Trial {crashed.number}: crashed")


@pytest.mark.slow
def test_a_trial_that_always_dies_is_retried_max_retries_times_then_given_up(tmp_path):
    url = f"sqlite:///{tmp_path / 'study.db'}"
    space = space_file(tmp_path, n_trials=1, max_retries=1, workload=CRASHY, misbehave="signal", signal="SIGKILL")
    run = hpo("run", space, "--storage", url)
    assert run.returncode == 1, run.stderr[-3000:]  # the study ran, but has no trial to call best
    found = trials(url)
    assert _states(found) == ["FAIL", "FAIL"]
    assert found[1].params == found[0].params
    # No OOM kill counted while it ran (where a count can be read): a kill -9, crashed and retried.
    hint = "kill -9: no OOM kill counted while it ran" if oom_kill_counter() else "the kernel's OOM killer, or kill -9"
    for trial in found:
        assert trial.user_attrs["verdict"] == f"crashed: trial process died (signal SIGKILL ({hint}))"
    assert "not retried: it ran 2 times (study.max_retries 1)" in run.stderr
    assert tickets(url) == ((1, 1), 0)


@pytest.mark.slow
def test_killed_worker_trial_is_retried_and_resumed_study_finishes_its_budget(storage_url, tmp_path):
    """SIGKILL the only worker's process group mid-trial; `hpo run` on the study then fails the
    orphaned trial once its heartbeats are older than the grace period, retries it with the same
    parameters and finishes the budget. (In-process: the child-process path is the next test's.)"""
    space = space_file(tmp_path, n_trials=3, workload=CRASHY, misbehave="hang", once=str(tmp_path / "hung"))
    create_study(space, storage_url)
    worker = start_worker(storage_url, "--in-process", log=tmp_path / "worker.log")
    try:
        wait_for(lambda: (tmp_path / "hung").exists(), timeout=120, what="a trial to hang")
        (hung,) = wait_for(
            lambda: [t for t in trials(storage_url) if t.state == TrialState.RUNNING],
            timeout=30,
            what="the hanging trial in the storage",
        )
    finally:
        kill_group(worker)

    resumed = hpo("run", space, "--storage", storage_url, "--in-process")
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert f"trial {hung.number} crashed: " in resumed.stderr and "retrying with the same parameters" in resumed.stderr
    found = trials(storage_url)
    killed = found[hung.number]
    assert killed.state == TrialState.FAIL and killed.user_attrs["verdict"].startswith("crashed: ")
    retry = _retry_of(killed, found)
    assert retry.params == killed.params and retry.state == TrialState.COMPLETE
    _assert_budget_spent_exactly(storage_url, 3, found)


@pytest.mark.slow
def test_worker_killed_beside_another_loses_nothing_on_postgres(postgres_or_pgbouncer_url, tmp_path):
    """Two workers share a study; one is SIGKILLed (itself only: its forkserver and trial process
    must follow it through PR_SET_PDEATHSIG) while its trial runs. The other fails that trial once
    its heartbeats stop, runs the retry with the same parameters, and spends the budget exactly.
    Directly and through PgBouncer in transaction-pooling mode: nothing relies on session state."""
    db_url = postgres_or_pgbouncer_url
    space = space_file(tmp_path, n_trials=4, workload=CRASHY, misbehave="hang", once=str(tmp_path / "hung"))
    create_study(space, db_url)
    workers = [start_worker(db_url, log=tmp_path / f"worker{i}.log") for i in range(2)]
    marker = tmp_path / "hung"
    try:
        hung_pid = int(wait_for(lambda: marker.exists() and marker.read_text(), timeout=120, what="a trial to hang"))
        (victim,) = [w for w in workers if hung_pid in descendants(w.pid)]
        (hung,) = wait_for(
            lambda: [
                t
                for t in trials(db_url)
                if t.state == TrialState.RUNNING and t.user_attrs.get("worker", "").endswith(f":{victim.pid}")
            ],
            timeout=30,
            what="the hanging trial in the storage",
        )
        doomed = descendants(victim.pid)
        victim.kill()  # the worker process only, not its group
        victim.wait(timeout=30)
        wait_for(lambda: not alive(doomed), timeout=10, what="the forkserver and trial process to die with their worker")
        survivor = next(w for w in workers if w is not victim)
        assert survivor.wait(timeout=180) == 0
    finally:
        for worker in workers:
            if worker.poll() is None:
                kill_group(worker)
    found = trials(db_url)
    killed = found[hung.number]
    assert killed.state == TrialState.FAIL
    retry = _retry_of(killed, found)
    assert retry.params == killed.params and retry.state == TrialState.COMPLETE
    _assert_budget_spent_exactly(db_url, 4, found)
    assert len({t.params["lr"] for t in found if t.state == TrialState.COMPLETE}) == 4  # no trial ran twice
