"""The worker asks the sampler and hands the trial to its trial process (hpo.runtime._handed): the
trial process reads none of the study's trials, and trains with the params its worker asked."""

from __future__ import annotations

import multiprocessing
from pathlib import Path

import optuna
import pytest
from optuna.storages import RDBStorage
from optuna.trial import TrialState

from hpo.runtime import _handed as handed
from hpo.runtime import ask_in_worker, bind_ticket, tickets_of
from hpo.runtime._child import run_one_trial
from hpo.storage import open_storage, trial_id_of
from hpo.study import open_hpo_study
from worker_harness import STUDY, create_study, space_file

EARLIER_TRIALS = 5


def _count_trial_reads_then_run(counts: str, *args) -> None:
    """A trial process as a worker starts one, with every read of the study's trials counted.
    `RDBStorage._get_trials` is where both Optuna's cache and `get_all_trials` read them."""
    calls = []
    real = RDBStorage._get_trials

    def spy(self, *a, **kw):
        calls.append(a)
        return real(self, *a, **kw)

    RDBStorage._get_trials = spy
    try:
        run_one_trial(*args)
    finally:
        Path(counts).write_text(str(len(calls)))


def _fill(study: optuna.Study, tickets) -> None:
    """Earlier trials of the study, each paid with a ticket: what a fresh cache would have to read."""
    for _ in range(EARLIER_TRIALS):
        serial = tickets.claim()
        trial = study.ask()
        tickets.bind(serial)
        study.tell(trial, trial.suggest_float("lr", 1e-4, 1e-2, log=True))


@pytest.mark.timeout(240)
def test_the_trial_process_reads_no_trial_of_the_study_and_trains_with_the_params_its_worker_asked(storage_url, tmp_path):
    create_study(space_file(tmp_path, n_trials=EARLIER_TRIALS + 1), storage_url)
    storage = open_storage(storage_url)
    study, space = open_hpo_study(storage, STUDY)
    tickets = tickets_of(study)
    _fill(study, tickets)
    serial = tickets.claim()
    trial_id, _ = ask_in_worker(study, space, serial, lambda t: bind_ticket(study, tickets, serial, t), "test-worker")
    asked = storage.get_trial(trial_id).params
    assert set(asked) == {"lr"}

    # A fresh interpreter, as the forkserver's children are fresh of the test's state: a fork of
    # pytest itself, after earlier tests ran torch's OpenMP pool, hangs in its first parallel op.
    context = multiprocessing.get_context("spawn")
    here, there = context.Pipe(duplex=True)
    counts = tmp_path / "trial-reads"
    args = (str(counts), storage_url, STUDY, trial_id, "test-worker", there, None, None, 0.01)
    child = context.Process(target=_count_trial_reads_then_run, args=args)
    child.start()
    there.close()
    messages = []
    while True:  # drain its messages until it exits (its first one: it took the trial)
        try:
            messages.append(here.recv())
        except EOFError:
            break
    child.join(timeout=60)
    here.close()

    assert child.exitcode == 0
    assert messages[0] == trial_id
    assert counts.read_text() == "0"  # not one read of the study's trials in the trial process
    trained = optuna.load_study(study_name=STUDY, storage=open_storage(storage_url)).get_trials()[-1]
    assert trained.number == EARLIER_TRIALS and trained.state == TrialState.COMPLETE
    assert trained.params == asked
    assert trained.user_attrs["config"]["params"]["lr"] == asked["lr"]  # what it trained with
    assert trained.user_attrs["phases_s"]["sample"] >= 0.01  # the worker's sampling time is the trial's
    assert tickets.state() == (EARLIER_TRIALS + 1, EARLIER_TRIALS + 1)


def test_a_trial_failed_as_stale_while_its_worker_samples_it_is_left_to_its_retry(storage_url, tmp_path, monkeypatch):
    """Fault: another worker's stale-trial sweep fails the trial while its worker is still sampling
    it (its heartbeats came late under load). The worker must neither tell a FAIL trial (Optuna
    raises "Cannot tell a FAIL trial": `hpo worker` exited 70 on CI) nor write over the sweep's record."""
    create_study(space_file(tmp_path, n_trials=2), storage_url)
    storage = open_storage(storage_url)
    study, space = open_hpo_study(storage, STUDY)
    tickets = tickets_of(study)
    serial = tickets.claim()
    sampled = handed.suggest_config

    def failed_by_a_sweep_then_sampled(trial, space):
        optuna.load_study(study_name=STUDY, storage=open_storage(storage_url))._storage.set_trial_state_values(
            trial_id_of(trial), TrialState.FAIL
        )
        return sampled(trial, space)

    monkeypatch.setattr(handed, "suggest_config", failed_by_a_sweep_then_sampled)
    with pytest.raises(handed.TakenOver) as taken:
        ask_in_worker(study, space, serial, lambda t: bind_ticket(study, tickets, serial, t), "test-worker")
    trial = storage.get_trial(taken.value.trial_id)
    assert trial.state == TrialState.FAIL
    assert trial.params == {}  # the sweep's FAIL came first: nothing was sampled into it after
