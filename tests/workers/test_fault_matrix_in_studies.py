"""The fault matrix through real studies: `hpo run` in-process and in trial processes, on SQLite and
PostgreSQL (and MySQL). An error (a workload bug, a transient failure) ends its trial FAIL with the traceback
on the worker's stderr and in `error_traceback`, caches nothing, leaves nothing for the sampler to
avoid, and is retried under study.max_retries with its ticket refunded, so the budget is spent
exactly. Executor-level cases: tests/faults/test_fault_matrix.py."""

from __future__ import annotations

import optuna
import pytest
from optuna.trial import TrialState

from hpo.errors import ExitCode
from hpo.records import check_trial_attrs
from hpo.storage import open_storage
from hpo.study._avoid import known_bad_parts
from hpo.verify.stored import StudyVerdicts
from worker_harness import STUDY, hpo, space_file, tickets, trials

FAULTY = "fault_workloads:Faulty"


def _study(url: str) -> optuna.Study:
    return optuna.load_study(study_name=STUDY, storage=open_storage(url))


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["in-process", "trial-process"])
def test_a_transient_training_error_fails_its_trial_then_passes_on_retry(mode, storage_url, tmp_path):
    space = space_file(tmp_path, n_trials=2, workload=FAULTY, fault="transient", at_call=3, once=str(tmp_path / "once"))
    run = hpo("run", space, "--storage", storage_url, *(["--in-process"] if mode == "in-process" else []))
    assert run.returncode == 0, run.stderr[-3000:]
    found = trials(storage_url)
    assert [t.state for t in found].count(TrialState.FAIL) == 1 and len(found) == 3, [t.state.name for t in found]
    failed = next(t for t in found if t.state == TrialState.FAIL)
    assert failed.user_attrs["verdict"] == "error: ConnectionResetError: connection to the feature store reset by peer"
    assert (
        "ConnectionResetError" in failed.user_attrs["error_traceback"] and "training_loss" in failed.user_attrs["error_traceback"]
    )
    assert "Traceback (most recent call last)" in run.stderr and "not a knob verdict" in run.stderr
    retry = next(t for t in found if t.user_attrs.get("retry_of") == failed.number)
    assert retry.state == TrialState.COMPLETE and retry.params == failed.params
    for t in found:
        check_trial_attrs(t.user_attrs)
    study = _study(storage_url)
    assert not [r for r in StudyVerdicts(study).all().values() if r["verdict"] != "ok"]  # nothing cached against the knobs
    assert known_bad_parts(study) == set()  # nothing for the sampler to avoid
    assert tickets(storage_url) == ((2, 2), 0)  # the retry took its ticket back: the budget is spent exactly


@pytest.mark.slow
def test_a_workload_bug_in_every_trial_ends_each_fail_and_the_run_says_none_trained(tmp_path):
    url = f"sqlite:///{tmp_path / 'study.db'}"
    space = space_file(tmp_path, n_trials=1, max_retries=1, workload=FAULTY, fault="loss_in_training")
    run = hpo("run", space, "--storage", url)
    assert run.returncode == 1, run.stderr[-3000:]  # no trial trained
    found = trials(url)
    assert [t.state for t in found] == [TrialState.FAIL, TrialState.FAIL]
    assert all(t.user_attrs["verdict"].startswith("error: ValueError: the user's loss divides") for t in found)
    assert "not retried: it ran 2 times (study.max_retries 1)" in run.stderr
    assert known_bad_parts(_study(url)) == set()


@pytest.mark.slow
def test_an_in_process_worker_stops_after_a_sticky_device_error(tmp_path):
    """A CUDA error that poisons the device fails its trial (no verdict) and queues its retry; the
    in-process worker cannot replace its own process, so it stops instead of running the retry on
    a poisoned device."""
    url = f"sqlite:///{tmp_path / 'study.db'}"
    space = space_file(tmp_path, n_trials=2, workload=FAULTY, fault="sticky", sticky_attention="eager")
    run = hpo("run", space, "--storage", url, "--in-process")
    assert run.returncode == ExitCode.WORKER_FAILED, run.stderr[-3000:]
    assert "the device is unusable after a sticky error" in run.stderr
    found = trials(url)
    assert [t.state for t in found] == [TrialState.FAIL, TrialState.WAITING]
    assert found[0].user_attrs["verdict"] == "error: RuntimeError: CUDA error: an illegal memory access was encountered"
    assert known_bad_parts(_study(url)) == set()


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["in-process", "trial-process"])
def test_a_workload_bug_that_repeats_on_its_retry_is_not_retried_again(mode, tmp_path):
    """A deterministic bug fails its retry with the same type, message and place: that retry is
    the last, whatever study.max_retries still allows (a transient error, above, passes on retry)."""
    url = f"sqlite:///{tmp_path / 'study.db'}"
    space = space_file(tmp_path, n_trials=1, max_retries=2, workload=FAULTY, fault="loss_in_training")
    run = hpo("run", space, "--storage", url, *(["--in-process"] if mode == "in-process" else []))
    assert run.returncode == ExitCode.NO_TRIAL_TRAINED, run.stderr[-3000:]
    first, retry = trials(url)  # two attempts, not max_retries + 1 = 3
    assert (first.state, retry.state) == (TrialState.FAIL, TrialState.FAIL) and retry.user_attrs["retry_of"] == first.number
    signature = "ValueError: the user's loss divides by an empty mask @ fault_workloads:Faulty.training_loss"
    assert first.user_attrs["error_signature"] == retry.user_attrs["error_signature"] == signature
    assert retry.user_attrs["not_retried"] == f"same error as trial {first.number}" and "not_retried" not in first.user_attrs
    assert f"not retried: same error as trial {first.number}" in run.stderr
    for t in (first, retry):
        check_trial_attrs(t.user_attrs)
    assert tickets(url) == ((1, 1), 0)  # the retry ran on the refunded ticket: the budget is spent exactly
