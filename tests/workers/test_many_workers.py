"""Many workers, one study: together they run exactly the study's budget, none twice."""

from __future__ import annotations

import json

import pytest
from optuna.trial import TrialState

from worker_harness import hpo, space_file, tickets, trials


def _assert_ran_exactly(storage_url: str, n_trials: int) -> list:
    found = trials(storage_url)
    assert [t.state for t in found] == [TrialState.COMPLETE] * n_trials, [t.state.name for t in found]
    assert all(t.user_attrs["verdict"] == "ok" for t in found), [t.user_attrs["verdict"] for t in found]
    # Each trial process seeds its sampler per ticket: one shared seed would repeat the parameters.
    assert len({t.params["lr"] for t in found}) == n_trials
    assert tickets(storage_url) == ((n_trials, n_trials), 0)
    return found


@pytest.mark.slow
def test_four_workers_run_one_study_on_postgres(postgres_url, tmp_path):
    run = hpo("run", space_file(tmp_path, n_trials=8), "--storage", postgres_url, "--workers", "4")
    assert run.returncode == 0, run.stderr[-3000:]
    found = _assert_ran_exactly(postgres_url, 8)
    assert len({t.user_attrs["worker"] for t in found}) > 1, "the trials should be shared among the workers"
    best = json.loads(run.stdout.strip().splitlines()[-1])
    assert best["number"] in {t.number for t in found}


@pytest.mark.slow
def test_workers_spend_the_budget_exactly_on_every_storage(storage_url, tmp_path):
    run = hpo("run", space_file(tmp_path, n_trials=4), "--storage", storage_url, "--workers", "2", "--in-process")
    assert run.returncode == 0, run.stderr[-3000:]
    _assert_ran_exactly(storage_url, 4)


@pytest.mark.slow
def test_a_worker_joins_a_running_study_and_a_finished_study_runs_nothing(postgres_url, tmp_path):
    space = space_file(tmp_path, n_trials=2)
    assert hpo("run", space, "--storage", postgres_url, "--in-process").returncode == 0
    join = hpo("worker", "--study", "workers", "--storage", postgres_url)
    assert join.returncode == 0, join.stderr[-3000:]
    assert len(trials(postgres_url)) == 2  # the budget was spent: the worker left at once
    extend = hpo("run", space, "--storage", postgres_url, "--n-trials", "3", "--in-process")
    assert extend.returncode == 0, extend.stderr[-3000:]
    _assert_ran_exactly(postgres_url, 3)
