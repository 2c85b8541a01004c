"""An exact trial budget shared by every worker: one row per study in table `hpo_budget`, and an
atomic conditional increment to claim a ticket. Counting trials and then asking races: two workers
see one trial left and both start one. The tables sit beside Optuna's in the same database.

A ticket is claimed before the trial it pays for exists, so a worker killed in between would lose
it. Each claim is therefore also a row in `hpo_claims` until its trial exists (`bind`); the
claiming worker touches the row while its trial process starts, and any worker gives back a claim
nobody touched for the grace period (`reap`), as Optuna fails a trial without heartbeats. Once
bound, the trial carries the ticket: a stale trial is failed, retried and its ticket refunded.
Times are the database server's clock, as Optuna's heartbeats are, so worker clocks may differ.
"""

from __future__ import annotations

from datetime import datetime, timedelta

import sqlalchemy as sa

_METADATA = sa.MetaData()
BUDGET = sa.Table(
    "hpo_budget",
    _METADATA,
    sa.Column("study_name", sa.String(512), primary_key=True),
    sa.Column("budget", sa.Integer, nullable=False),
    sa.Column("claimed", sa.Integer, nullable=False),  # tickets in use: claims minus refunds
    sa.Column("issued", sa.Integer, nullable=False),  # claims ever made: a unique serial per claim
)
CLAIMS = sa.Table(
    "hpo_claims",
    _METADATA,
    sa.Column("study_name", sa.String(512), primary_key=True),
    sa.Column("serial", sa.Integer, primary_key=True),
    sa.Column("touched_at", sa.DateTime, nullable=False),
)


class TicketBudget:
    def __init__(self, engine: sa.Engine, study_name: str):
        self.engine, self.study_name = engine, study_name

    def create(self, budget: int) -> None:
        """Create the tables and this study's row (keeping an existing row's claims)."""
        _METADATA.create_all(self.engine, checkfirst=True)
        _add_issued_column(self.engine)
        with self.engine.begin() as conn:
            row = conn.execute(sa.select(BUDGET.c.budget).where(self._budget_row)).first()
            if row is None:
                conn.execute(BUDGET.insert().values(study_name=self.study_name, budget=budget, claimed=0, issued=0))
            elif row.budget < budget:
                conn.execute(BUDGET.update().where(self._budget_row).values(budget=budget))

    @property
    def _budget_row(self):
        return BUDGET.c.study_name == self.study_name

    def _claim_row(self, serial: int):
        return sa.and_(CLAIMS.c.study_name == self.study_name, CLAIMS.c.serial == serial)

    def claim(self) -> int | None:
        """Take one ticket if any is left and return its serial (1, 2, ...); exactly `budget`
        claims ever succeed, net of refunds. None when the budget is spent."""
        take = (
            BUDGET.update()
            .where(self._budget_row, BUDGET.c.claimed < BUDGET.c.budget)
            .values(claimed=BUDGET.c.claimed + 1, issued=BUDGET.c.issued + 1)
        )
        with self.engine.begin() as conn:
            if conn.execute(take).rowcount != 1:
                return None
            # Our own update is visible to us, and the row stays locked until commit.
            serial = conn.execute(sa.select(BUDGET.c.issued).where(self._budget_row)).scalar_one()
            conn.execute(CLAIMS.insert().values(study_name=self.study_name, serial=serial, touched_at=sa.func.now()))
        return serial

    def touch(self, serial: int) -> None:
        """The claimer is alive and its trial is still starting."""
        with self.engine.begin() as conn:
            conn.execute(CLAIMS.update().where(self._claim_row(serial)).values(touched_at=sa.func.now()))

    def bind(self, serial: int) -> bool:
        """The claim's trial exists: from now on its heartbeats protect the ticket. False when the
        claim was gone: another worker reaped it (its ticket is back in the budget) because nobody
        touched it for the grace period, e.g. while the database was unreachable. That trial must
        not run, or the ticket pays for two trials."""
        with self.engine.begin() as conn:
            return conn.execute(CLAIMS.delete().where(self._claim_row(serial))).rowcount == 1

    def release(self, serial: int, untouched_since: datetime | None = None) -> bool:
        """Give an unbound claim's ticket back (its trial never started); False if it was bound,
        already released, or touched after `untouched_since`."""
        condition = self._claim_row(serial)
        if untouched_since is not None:
            condition = sa.and_(condition, CLAIMS.c.touched_at < untouched_since)
        with self.engine.begin() as conn:
            if conn.execute(CLAIMS.delete().where(condition)).rowcount != 1:
                return False
            conn.execute(self._refund_stmt())
        return True

    def reap(self, grace_period_s: float) -> int:
        """Release every claim nobody touched for the grace period: its worker died before its
        trial started. Returns how many tickets came back."""
        with self.engine.connect() as conn:
            now = conn.execute(sa.select(sa.func.now())).scalar_one()
            rows = conn.execute(
                sa.select(CLAIMS.c.serial, CLAIMS.c.touched_at).where(CLAIMS.c.study_name == self.study_name)
            ).all()
        # PostgreSQL answers with a time zone, the column stores none (as Optuna's heartbeats do).
        cutoff = now.replace(tzinfo=None) - timedelta(seconds=grace_period_s)
        return sum(self.release(row.serial, untouched_since=cutoff) for row in rows if row.touched_at < cutoff)

    def pending(self) -> int:
        """Claims whose trial has not started yet."""
        with self.engine.connect() as conn:
            return conn.execute(sa.select(sa.func.count()).where(CLAIMS.c.study_name == self.study_name)).scalar_one()

    def refund(self) -> None:
        """Give one ticket back (its trial failed and is being retried)."""
        with self.engine.begin() as conn:
            conn.execute(self._refund_stmt())

    def _refund_stmt(self):
        return BUDGET.update().where(self._budget_row, BUDGET.c.claimed > 0).values(claimed=BUDGET.c.claimed - 1)

    def state(self) -> tuple[int, int]:
        """(claimed, budget); (0, 0) when the study has no budget row."""
        with self.engine.connect() as conn:
            row = conn.execute(sa.select(BUDGET.c.claimed, BUDGET.c.budget).where(self._budget_row)).first()
        return (row.claimed, row.budget) if row else (0, 0)


def _add_issued_column(engine: sa.Engine) -> None:
    """Studies made by hpo before claim serials existed: add the column, counting past claims."""
    if "issued" in {c["name"] for c in sa.inspect(engine).get_columns("hpo_budget")}:
        return
    with engine.begin() as conn:
        conn.execute(sa.text("ALTER TABLE hpo_budget ADD COLUMN issued INTEGER NOT NULL DEFAULT 0"))
        conn.execute(BUDGET.update().values(issued=BUDGET.c.claimed))
