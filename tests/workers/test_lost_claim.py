"""A claim reaped while its worker could not touch it (a database blip) has paid for another trial
already: the trial that then tries to bind it ends FAIL without training, a waiting trial it took
goes back to the queue, and the budget is spent once. On every storage."""

from __future__ import annotations

import subprocess
import sys

import optuna
import pytest
from optuna.trial import TrialState
from space_files import write_space

from hpo.config.space import load_space
from hpo.runtime._ticket_claims import LOST, BindOnStart, ClaimLost, bind_ticket, tickets_of
from hpo.storage import open_storage
from hpo.study import create_or_resume
from worker_harness import ROOT, STUDY, create_study, hpo_env, space_file, tickets, trials

SPACE = {
    "study": {"name": "lost", "sampler": {"name": "random"}, "n_trials": 2},
    "workload": {"name": "toy_workloads:Toy", "max_steps": 2, "eval_every": 2},
    "params": {"lr": {"low": 1.0e-4, "high": 1.0e-2, "log": True}},
}


@pytest.fixture
def study(storage_url, tmp_path):
    path = write_space(tmp_path / "space.yaml", SPACE)
    create_or_resume(load_space(path), storage_url)
    storage = open_storage(storage_url)
    yield optuna.load_study(study_name="lost", storage=storage)
    storage.engine.dispose()


def _run_with_reaped_claim(study: optuna.Study) -> list[str]:
    """Claim a ticket, have it reaped (released: what `reap` does to a claim untouched for the
    grace period), then run a trial on it as a worker does."""
    tickets, trained = tickets_of(study), []
    serial = tickets.claim()
    assert tickets.release(serial)
    study.sampler = BindOnStart(optuna.samplers.RandomSampler(), on_start=lambda t: bind_ticket(study, tickets, serial, t))
    with pytest.raises(ClaimLost):
        study.optimize(lambda trial: trained.append(trial.suggest_float("lr", 1e-4, 1e-2, log=True)) or 1.0, n_trials=1)
    return trained


def test_a_fresh_trial_on_a_reaped_claim_fails_without_training(study):
    assert _run_with_reaped_claim(study) == []
    (trial,) = study.get_trials()
    assert trial.state == TrialState.FAIL and trial.user_attrs["verdict"] == LOST
    assert tickets_of(study).state() == (0, 2) and tickets_of(study).pending() == 0  # nothing spent


def test_a_waiting_retry_taken_on_a_reaped_claim_goes_back_to_the_queue(study):
    study.enqueue_trial({"lr": 1e-3}, user_attrs={"retry_of": 7})
    assert _run_with_reaped_claim(study) == []
    taken, requeued = study.get_trials()
    assert taken.state == TrialState.FAIL and taken.user_attrs["verdict"] == LOST
    assert requeued.state == TrialState.WAITING and requeued.user_attrs == {"retry_of": 7}
    # The next ticket's trial runs it, with its parameters.
    tickets = tickets_of(study)
    serial = tickets.claim()
    study.sampler = BindOnStart(optuna.samplers.RandomSampler(), on_start=lambda t: bind_ticket(study, tickets, serial, t))
    study.optimize(lambda trial: trial.suggest_float("lr", 1e-4, 1e-2, log=True), n_trials=1)
    assert study.get_trials()[1].state == TrialState.COMPLETE and study.get_trials()[1].params == {"lr": 1e-3}
    assert tickets.state() == (1, 2)


CHILD_ON_A_REAPED_CLAIM = """
import sys
from hpo.storage._open import open_storage
from hpo.runtime._ticket_claims import ClaimKeeper, tickets_of
from hpo.study._create import open_hpo_study
from hpo.runtime._child_trials import ChildTrials

study, space = open_hpo_study(open_storage(sys.argv[1]), sys.argv[2])
tickets = tickets_of(study)
serial = tickets.claim()
assert tickets.release(serial)  # what another worker's reap does after a database blip
run_one = ChildTrials(study, sys.argv[1], space, tickets)
with ClaimKeeper(study, tickets, serial) as keeper:
    run_one(serial, keeper)
print("startup failures", run_one.startup_failures)
"""


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_a_trial_process_on_a_reaped_claim_ends_cleanly_without_training(tmp_path):
    url = f"sqlite:///{tmp_path / 'study.db'}"
    create_study(space_file(tmp_path, n_trials=2), url)
    run = subprocess.run(
        [sys.executable, "-c", CHILD_ON_A_REAPED_CLAIM, url, STUDY],
        capture_output=True,
        text=True,
        env=hpo_env(),
        cwd=ROOT,
        timeout=200,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    assert "startup failures 0" in run.stdout  # a clean exit, not a trial process that failed to start
    (trial,) = trials(url)
    assert trial.state == TrialState.FAIL and trial.user_attrs == {"verdict": LOST}  # nothing of a training run
    assert tickets(url) == ((0, 2), 0)
