"""What a trial records around its objective, in a child or in its worker, and how a dead child
is described."""

from __future__ import annotations

import signal

import optuna
import pytest
from optuna.trial import TrialState

from hpo.config.space import parse_space
from hpo.runtime import BindOnStart, GuardedObjective, sampler_for_ticket
from hpo.runtime._child_trials import crash_verdict
from hpo.storage import UNFINISHED


def _run(objective) -> optuna.trial.FrozenTrial:
    study = optuna.create_study()
    study.optimize(GuardedObjective(objective, worker="host:1"), n_trials=1, catch=(Exception,))
    return study.trials[0]


def test_an_escaping_exception_is_recorded_as_an_error_verdict_without_the_password():
    def objective(trial):
        raise ConnectionError("lost postgresql+psycopg://u:s3cret@db/x\nsecond line")

    trial = _run(objective)
    assert trial.state == TrialState.FAIL
    traceback = trial.user_attrs.pop("error_traceback")
    signature = trial.user_attrs.pop("error_signature")
    assert trial.user_attrs == {"verdict": "error: ConnectionError: lost postgresql+psycopg://u:***@db/x", "worker": "host:1"}
    where = f"{__name__}:{objective.__qualname__}"
    assert signature == f"ConnectionError: lost postgresql+psycopg://u:***@db/x @ {where}"
    assert "Traceback (most recent call last)" in traceback and "in objective" in traceback and "s3cret" not in traceback


def test_a_trial_that_never_returns_keeps_the_crashed_placeholder():
    seen = {}

    def objective(trial):
        seen.update(trial.study.trials[0].user_attrs)
        return 1.0

    trial = _run(objective)
    assert seen["verdict"] == UNFINISHED and UNFINISHED.startswith("crashed: ")
    assert trial.state == TrialState.COMPLETE


@pytest.mark.parametrize(
    ("exitcode", "verdict"),
    [
        (-signal.SIGSEGV, "crashed: trial process died (signal SIGSEGV)"),
        (-signal.SIGKILL, "crashed: trial process died (signal SIGKILL (the kernel's OOM killer, or kill -9))"),
        (1, "crashed: trial process died (exit code 1)"),
    ],
)
def test_crash_verdict_names_the_cause(exitcode, verdict):
    assert str(crash_verdict(exitcode)) == verdict


def test_each_ticket_seeds_its_own_sampler():
    space = parse_space(
        {
            "workload": {"name": "toy_workloads:Toy"},
            "study": {"sampler": {"name": "random", "seed": 3}},
            "params": {"lr": {"low": 1e-4, "high": 1e-2}},
        },
        source="test",
    )

    def first_lr(serial: int) -> float:
        study = optuna.create_study(sampler=sampler_for_ticket(space, serial))
        return study.ask().suggest_float("lr", 1e-4, 1e-2)

    assert first_lr(1) == first_lr(1) != first_lr(2)


def test_the_ticket_is_bound_when_the_trial_exists_before_any_sampling():
    events = []

    class Recording(optuna.samplers.RandomSampler):
        def sample_independent(self, *args):
            events.append("sampled")
            return super().sample_independent(*args)

    study = optuna.create_study(sampler=BindOnStart(Recording(seed=0), on_start=lambda trial_id: events.append(trial_id)))
    study.optimize(lambda trial: trial.suggest_float("x", 0, 1), n_trials=2)
    assert events == [0, "sampled", 1, "sampled"]
