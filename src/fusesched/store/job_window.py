"""The jobs of a time window (``sacct -S … -E …``): those that waited or ran at some point in
``[since, until]`` — submitted by ``until``, and not ended before ``since``.

Asked of a large store, most jobs ended long ago, so the query is two parts that each walk a
small index: the jobs that ended since ``since`` (``ix_jobs_end_time``, or with users
``ix_jobs_user_end_time``) and the few unfinished ones (the partial index of live jobs; the
users are tested row by row there, else SQLite would walk each user's whole history). Their
union is sorted newest first.
"""

from __future__ import annotations

from sqlalchemy import Select, select, union_all

from fusesched.store.batch import unindexed
from fusesched.store.schema import jobs, unfinished


def windowed(
    stmt: Select[tuple[object, ...]],
    users: list[str] | None,
    since: float | None,
    until: float | None,
    limit: int,
) -> Select[tuple[object, ...]]:
    """``stmt`` (jobs newest first, the other filters applied; the ``users`` filter not yet
    when ``since`` is given) narrowed to the window. Without ``since`` only the submit time
    is tested (``stmt`` walks as it would)."""
    if until is not None:
        stmt = stmt.where(jobs.c.submit_time <= until)
    if since is None:
        return stmt
    base = stmt.order_by(None).limit(None)
    ended = base.where(jobs.c.end_time >= since, ~unfinished(unindexed(jobs.c.state)))
    live = base.where(unfinished(jobs.c.state))
    if users is not None:
        ended = ended.where(jobs.c.user.in_(users))
        live = live.where(unindexed(jobs.c.user).in_(users))
    both = union_all(ended, live).subquery()
    newest = (both.c.seq + 0).desc()  # (an expression: SQLite walks no seq index for it)
    return select(both).order_by(newest).limit(limit)
