"""A crashed or abandoned trial is failed with its cause and retried with the same parameters, up
to the study's max_retries, and its ticket is refunded; on every storage."""

from __future__ import annotations

import optuna
import pytest
from clock import backdate
from optuna.storages import RetryHeartbeatStaleTrialCallback
from optuna.trial import TrialState
from space_files import write_space

from hpo.config.space import load_space
from hpo.runtime import GuardedObjective
from hpo.runtime._ticket_claims import recover, tickets_of
from hpo.storage import MAX_RETRIES_ATTR, engine_of, fail_crashed_trial, open_storage, storage_of, trial_id_of
from hpo.study import create_or_resume

SPACE = {
    "study": {"name": "retry", "sampler": {"name": "random"}, "n_trials": 3, "max_retries": 1},
    "workload": {"name": "toy_workloads:Toy", "max_steps": 2, "eval_every": 2},
    "params": {"lr": {"low": 1.0e-4, "high": 1.0e-2, "log": True}},
}


@pytest.fixture
def study(storage_url, tmp_path):
    path = write_space(tmp_path / "space.yaml", SPACE)
    create_or_resume(load_space(path), storage_url)
    storage = open_storage(storage_url, heartbeat_interval=1, grace_period=60)
    yield optuna.load_study(study_name="retry", storage=storage)
    storage.engine.dispose()


def _start_trial(study: optuna.Study) -> optuna.Trial:
    """What a worker does: claim a ticket, ask (a waiting retry comes first), bind the ticket."""
    tickets = tickets_of(study)
    serial = tickets.claim()
    trial = study.ask()
    trial.suggest_float("lr", 1e-4, 1e-2, log=True)
    tickets.bind(serial)
    return trial


def test_crashed_trial_is_retried_with_same_params_then_given_up(study, capsys):
    first = _start_trial(study)
    assert fail_crashed_trial(study, trial_id_of(first), "crashed: trial process died (signal SIGSEGV)")
    assert not fail_crashed_trial(study, trial_id_of(first), "crashed: again")  # already failed: no second retry
    failed, waiting = study.get_trials()
    assert failed.state == TrialState.FAIL and failed.user_attrs["verdict"] == "crashed: trial process died (signal SIGSEGV)"
    assert waiting.state == TrialState.WAITING and waiting.params == failed.params
    assert waiting.user_attrs == {"retry_of": 0, "previous_verdict": failed.user_attrs["verdict"]}
    assert tickets_of(study).state() == (0, 3)  # refunded: the retry does not eat into the budget

    second = _start_trial(study)
    assert second.number == waiting.number and second.params == failed.params
    assert RetryHeartbeatStaleTrialCallback.retry_history(study.get_trials()[1]) == [0]
    fail_crashed_trial(study, trial_id_of(second), "crashed: trial process died (signal SIGKILL)")
    assert [t.state for t in study.get_trials()] == [TrialState.FAIL, TrialState.FAIL]  # max_retries 1: no third run
    assert tickets_of(study).state() == (1, 3)
    assert "not retried: it ran 2 times (study.max_retries 1)" in capsys.readouterr().err


def test_trial_without_heartbeats_is_failed_and_retried_by_any_worker(study):
    trial = _start_trial(study)
    storage_of(study).record_heartbeat(trial_id_of(trial))  # then its worker dies
    recover(study, tickets_of(study))
    assert [t.state for t in study.get_trials()] == [TrialState.RUNNING]  # a fresh heartbeat: alive
    assert backdate(engine_of(storage_of(study)), "trial_heartbeats", "heartbeat", seconds=120) == 1  # grace: 60 s
    recover(study, tickets_of(study))
    stale, retry = study.get_trials()
    assert stale.state == TrialState.FAIL and retry.state == TrialState.WAITING
    assert retry.params == stale.params and retry.system_attrs["failed_trial"] == stale.number
    assert tickets_of(study).state() == (0, 3)


def test_max_retries_follows_the_space_file_when_resumed(storage_url, tmp_path):
    path = write_space(tmp_path / "space.yaml", SPACE)
    create_or_resume(load_space(path), storage_url)
    write_space(path, {**SPACE, "study": {**SPACE["study"], "max_retries": 4}})
    study = create_or_resume(load_space(path), storage_url)
    assert study.user_attrs["hpo:max_retries"] == 4


@pytest.mark.parametrize(
    ("second_message", "retried_again"),
    [("the user's loss divides by an empty mask", False), ("connection to the feature store reset by peer", True)],
)
def test_a_retry_that_fails_with_the_same_error_as_the_attempt_before_is_not_retried_again(
    study, capsys, second_message, retried_again
):
    study.set_user_attr(MAX_RETRIES_ATTR, 5)  # retries to spare: only the repeated error stops them
    for message in ("the user's loss divides by an empty mask", second_message):
        trial = _start_trial(study)

        def objective(_trial, message=message):
            raise ValueError(message)

        with pytest.raises(ValueError):
            GuardedObjective(objective, worker="w")(trial)
        study.tell(trial, state=TrialState.FAIL)
    first, second, *rest = study.get_trials()
    assert (
        second.user_attrs["retry_of"] == 0
        and second.user_attrs["previous_error_signature"] == first.user_attrs["error_signature"]
    )
    assert first.user_attrs["error_signature"].endswith(f"@ {__name__}:{objective.__qualname__}")
    if retried_again:
        assert [t.state for t in rest] == [TrialState.WAITING] and "not_retried" not in second.user_attrs
    else:
        assert rest == [] and second.user_attrs["not_retried"] == "same error as trial 0"
        assert "not retried: same error as trial 0" in capsys.readouterr().err
        assert tickets_of(study).state() == (1, 3)  # the first retry's ticket was refunded, not this one's
