"""The statement behind :meth:`Store.list_jobs <fusesched.store.store.Store.list_jobs>`: jobs
newest first, filtered, walking the index that finds the asked-for jobs soonest.

With a user, it walks the user's (user, seq) index and tests the rest row by row: a user's
newest jobs come first there. SQLite has no value statistics and would otherwise often walk a
whole state or queue to find a small user's jobs. Likewise a tenant's listing walks the
(tenant, seq) index, an array's members the array's, and a time window the window's
(:mod:`~fusesched.store.job_window`).
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

from sqlalchemy import ColumnElement, Select, and_, or_, select

from fusesched.store.batch import unindexed
from fusesched.store.job_filters import JobFilters
from fusesched.store.job_window import windowed
from fusesched.store.records import JobState
from fusesched.store.schema import jobs


def job_listing(
    filters: JobFilters, *, limit: int, before_seq: int | None, apart: bool = False
) -> Select[tuple[object, ...]] | None:
    """The query of ``Store.list_jobs``: the jobs ``filters`` asks for, newest first, at most
    ``limit``, before ``before_seq`` when given; None when no job can match (an empty list
    of users, queues, ids or names, or of states and phases). ``apart``: without the
    waiting array members that :mod:`.array_rows` combines."""
    if limit < 1:
        raise ValueError(f"limit must be at least 1, got {limit}")
    if not matchable(filters):
        return None
    users = _listed(filters.users)
    stmt = select(jobs).order_by(jobs.c.seq.desc()).limit(limit)
    state: ColumnElement[str] = jobs.c.state
    queue_column: ColumnElement[str] = jobs.c.queue
    tenant_column: ColumnElement[str] = jobs.c.tenant
    array_parent, since = filters.array_parent, filters.since
    if array_parent is not None:  # walk the array's index, test the rest row by row
        stmt = stmt.where(jobs.c.array_parent == array_parent)
    if since is None and users is not None:
        stmt = stmt.where(jobs.c.user.in_(users))
    if array_parent is not None or since is not None or users is not None:
        # another index walks (a window's serves its users too): test these row by row
        state, queue_column = unindexed(state), unindexed(queue_column)
        tenant_column = unindexed(tenant_column)
    elif filters.tenant is not None:
        state, queue_column = unindexed(state), unindexed(queue_column)
    if apart:  # (their rows are combined: :mod:`.array_rows`)
        stmt = stmt.where(~waiting_member(unindexed(jobs.c.state)))
    found = filtered(
        stmt, filters, state=state, queue_column=queue_column, tenant_column=tenant_column
    )
    if found is None:
        return None
    stmt = found
    if before_seq is not None:
        stmt = stmt.where(jobs.c.seq < before_seq)
    return windowed(stmt, users, since, filters.until, limit)


def waiting_member(state: ColumnElement[str]) -> ColumnElement[bool]:
    """Whether a job is an array's member that waits and never started: what squeue shows
    with its array's others that wait for the same reason, as one row (``state``: the state
    column, or an expression of it that no index serves)."""
    return and_(
        state == JobState.PENDING.value,
        unindexed(jobs.c.array_parent).is_not(None),
        jobs.c.start_time.is_(None),
    )


def filtered(
    stmt: Select[Any],
    filters: JobFilters,
    *,
    state: ColumnElement[str],
    queue_column: ColumnElement[str],
    tenant_column: ColumnElement[str],
) -> Select[Any] | None:
    """``stmt`` with the filters on tenant, queues, ids, names and states/phases/``also`` of
    ``filters`` (the others are the caller's), tested on the columns given (each the column,
    or an expression that no index serves); None when no job can be in the states asked."""
    if filters.tenant is not None:
        stmt = stmt.where(tenant_column == filters.tenant)
    if filters.queues is not None:
        stmt = stmt.where(queue_column.in_(list(filters.queues)))
    ids, names = _listed(filters.ids), _listed(filters.names)
    if ids is not None:  # by primary key and the array index, whatever else is asked
        stmt = stmt.where(or_(jobs.c.id.in_(ids), jobs.c.array_parent.in_(ids)))
    if names is not None:
        stmt = stmt.where(jobs.c.name.in_(names))
    states, phases, also = filters.states, _listed(filters.phases), _listed(filters.also)
    if states is not None or phases is not None or also is not None:
        wanted = sorted({JobState.parse(s).value for s in states or ()})
        terms = [state.in_(wanted)] if wanted else []
        if phases:
            terms.append(jobs.c.phase.in_(phases))
        if also:
            terms.append(jobs.c.id.in_(also))
        if not terms:
            return None
        stmt = stmt.where(or_(*terms))
    return stmt


def matchable(filters: JobFilters) -> bool:
    """False when no job can match: an empty list of users, queues, ids or names."""
    given = (filters.users, filters.queues, filters.ids, filters.names)
    return not any(wanted is not None and not wanted for wanted in given)


def _listed(values: Collection[str] | None) -> list[str] | None:
    """A filter's values as a list for ``IN`` (``None``: no filter; :class:`JobFilters`
    keeps them sorted)."""
    return None if values is None else list(values)
