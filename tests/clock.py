"""Make rows look old instead of waiting for them to age: heartbeats and ticket claims are judged
against the database server's clock, so a test moves the stored time back rather than sleeping."""

from __future__ import annotations

from datetime import timedelta

import sqlalchemy as sa


def backdate(engine: sa.Engine, table: str, column: str, seconds: float) -> int:
    """Move every row's `column` of `table` back by `seconds`; returns how many rows moved."""
    rows = sa.Table(table, sa.MetaData(), autoload_with=engine)
    key = list(rows.primary_key.columns)
    with engine.begin() as conn:
        found = conn.execute(sa.select(*key, rows.c[column])).all()
        for row in found:
            where = [c == row[i] for i, c in enumerate(key)]
            conn.execute(rows.update().where(*where).values({column: row[-1] - timedelta(seconds=seconds)}))
    return len(found)
