"""An exact trial budget shared by every worker: one row per study in table `hpo_budget`, and an
atomic conditional increment to claim a ticket. Counting trials and then asking races: two workers
see one trial left and both start one. The table sits beside Optuna's in the same database."""

from __future__ import annotations

import sqlalchemy as sa

_METADATA = sa.MetaData()
BUDGET = sa.Table(
    "hpo_budget",
    _METADATA,
    sa.Column("study_name", sa.String(512), primary_key=True),
    sa.Column("budget", sa.Integer, nullable=False),
    sa.Column("claimed", sa.Integer, nullable=False),
)


class TicketBudget:
    def __init__(self, engine: sa.Engine, study_name: str):
        self.engine, self.study_name = engine, study_name

    def create(self, budget: int) -> None:
        """Create the table and this study's row (keeping an existing row's claims)."""
        _METADATA.create_all(self.engine, checkfirst=True)
        with self.engine.begin() as conn:
            row = conn.execute(sa.select(BUDGET.c.budget).where(BUDGET.c.study_name == self.study_name)).first()
            if row is None:
                conn.execute(BUDGET.insert().values(study_name=self.study_name, budget=budget, claimed=0))
            elif row.budget < budget:
                conn.execute(BUDGET.update().where(BUDGET.c.study_name == self.study_name).values(budget=budget))

    def claim(self) -> bool:
        """Take one ticket if any is left; exactly `budget` claims ever succeed."""
        stmt = (
            BUDGET.update()
            .where(BUDGET.c.study_name == self.study_name, BUDGET.c.claimed < BUDGET.c.budget)
            .values(claimed=BUDGET.c.claimed + 1)
        )
        with self.engine.begin() as conn:
            return conn.execute(stmt).rowcount == 1

    def refund(self) -> None:
        """Give one ticket back (its trial failed and is being retried)."""
        stmt = (
            BUDGET.update()
            .where(BUDGET.c.study_name == self.study_name, BUDGET.c.claimed > 0)
            .values(claimed=BUDGET.c.claimed - 1)
        )
        with self.engine.begin() as conn:
            conn.execute(stmt)

    def state(self) -> tuple[int, int]:
        with self.engine.connect() as conn:
            row = conn.execute(
                sa.select(BUDGET.c.claimed, BUDGET.c.budget).where(BUDGET.c.study_name == self.study_name)
            ).first()
        return (row.claimed, row.budget) if row else (0, 0)
