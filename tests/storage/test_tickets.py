"""The ticket budget on every storage: exact under concurrent claims, and no ticket outlives the
worker that claimed it."""

from __future__ import annotations

import threading

import pytest
import sqlalchemy as sa
from clock import backdate

from hpo.storage import TicketBudget, engine_of, open_storage


@pytest.fixture
def engine(storage_url):
    storage = open_storage(storage_url, create=True)  # Optuna's tables too, as `hpo run` makes them
    yield engine_of(storage)
    storage.engine.dispose()


def test_concurrent_claims_take_exactly_the_budget(engine, storage_url):
    TicketBudget(engine, "s").create(24)
    taken: list[int] = []
    lock = threading.Lock()

    def claim_all() -> None:
        mine = sa.create_engine(storage_url, connect_args={"timeout": 60} if storage_url.startswith("sqlite") else {})
        budget = TicketBudget(mine, "s")
        while (serial := budget.claim()) is not None:
            with lock:
                taken.append(serial)
        mine.dispose()

    threads = [threading.Thread(target=claim_all) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(taken) == list(range(1, 25))
    assert TicketBudget(engine, "s").state() == (24, 24)


def test_only_unbound_claims_come_back(engine):
    tickets = TicketBudget(engine, "s")
    tickets.create(4)
    assert [tickets.claim() for _ in range(5)] == [1, 2, 3, 4, None]
    assert tickets.bind(1)  # its trial exists: the trial's heartbeats protect this ticket now
    assert not tickets.release(1)
    assert tickets.release(2) and not tickets.release(2)
    assert not tickets.bind(2) and not tickets.bind(1)  # a claim given back (or bound) cannot be bound
    assert tickets.state() == (3, 4) and tickets.pending() == 2
    assert tickets.reap(grace_period_s=60) == 0  # both claims fresh
    assert backdate(engine, "hpo_claims", "touched_at", seconds=120) == 2
    tickets.touch(3)  # its worker is alive, its trial still starting
    assert tickets.reap(grace_period_s=60) == 1  # claim 4: its worker died before its trial started
    assert tickets.state() == (2, 4) and tickets.pending() == 1
    assert tickets.claim() == 5  # serials never repeat, so per-ticket sampler seeds do not either


def test_budget_grows_but_never_shrinks_and_refunds_stop_at_zero(engine):
    tickets = TicketBudget(engine, "s")
    tickets.create(2)
    tickets.refund()
    assert tickets.state() == (0, 2)
    tickets.claim()
    tickets.create(5)  # `hpo run --n-trials 5` on an existing study
    tickets.create(3)
    assert tickets.state() == (1, 5)
    assert TicketBudget(engine, "other").state() == (0, 0)


def test_a_budget_table_from_before_claim_serials_is_upgraded_in_place(engine):
    with engine.begin() as conn:
        conn.execute(
            sa.text(
                "CREATE TABLE hpo_budget (study_name VARCHAR(512) PRIMARY KEY, budget INTEGER NOT NULL, claimed INTEGER NOT NULL)"
            )
        )
        conn.execute(sa.text("INSERT INTO hpo_budget VALUES ('s', 5, 3)"))
    tickets = TicketBudget(engine, "s")
    tickets.create(5)  # what `hpo run` does when it resumes a study
    assert tickets.state() == (3, 5) and tickets.claim() == 4
