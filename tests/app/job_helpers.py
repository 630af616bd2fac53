"""Helpers of the job tests: row counts, a worker's run context, and a small ranking dataset
(LIBSVM text with qid) for the structural estimator."""

from __future__ import annotations

from sqlalchemy import func, select

from app.jobs.runner import RunContext


def count(db, table) -> int:
    with db.session() as session:
        return session.scalar(select(func.count()).select_from(table))


def context(app, **kwargs) -> RunContext:
    return RunContext(app.state.settings, app.state.db, **kwargs)


STRUCTURAL = b"1 qid:1 1:1 2:0.5\n0.5 qid:1 2:1\n1 qid:2 1:-1 3:1\n2 qid:2 3:0.5\n1 qid:3 2:1 3:1\n"
