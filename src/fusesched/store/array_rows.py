"""The rows of ``GET /v1/jobs?combine_arrays=true`` (squeue without ``-r``): the jobs newest
first, as :meth:`Store.list_jobs <fusesched.store.store.Store.list_jobs>` lists them, but
each array's members that wait and never started, and wait for the same reason, as ONE row
(:class:`ArrayRow`); the members that run or ran keep a row each.

Two queries, each at most ``limit`` rows: the other jobs (:func:`~.job_list.job_listing`,
``apart``), and the waiting members grouped by array and reason in SQL (reading the partial
index of waiting members, ``ix_jobs_waiting_members``, in its order: by array and reason),
each group placed at its newest member's seq. Their merge is cut at ``limit``: a combined
row counts as one. An array of 100,000 waiting members is one grouped row here, read from
that index alone, and its indices are read only when they are not one unbroken range.

Paging: ``before_seq`` lists the jobs before that seq, and the groups whose newest member is
before it (a group is listed whole, on the page of its newest member).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from typing import Any

from sqlalchemy import BigInteger, Connection, Select, cast, func, select

from fusesched.model.array_tasks import capped, index_ranges, run_text
from fusesched.store.batch import unindexed
from fusesched.store.convert import job_row
from fusesched.store.job_filters import JobFilters
from fusesched.store.job_list import filtered, job_listing, matchable
from fusesched.store.records import JobRow
from fusesched.store.schema import jobs, waiting_members


@dataclass(frozen=True, slots=True)
class ArrayRow:
    """``count`` waiting members of the array ``newest.array_parent`` that wait for the
    reason ``newest.reason``, as one row: ``newest`` is the newest of them (its view stands
    for all), ``indices`` their indices (``2-999``, ``1,4-6``: :func:`index_ranges`; one
    longer than 64 characters cut after a whole run, ``1,3,5,...``: :func:`capped`)."""

    newest: JobRow
    indices: str
    count: int

    @property
    def throttle(self) -> int | None:
        """The array's throttle (``sbatch -a 0-9%2``: 2), None for none."""
        return _array(self.newest).get("max_parallel") or None


#: A row of the listing: one job, or an array's waiting members.
Listed = JobRow | ArrayRow

#: The member's index: its id after the array's id and ``_``.
_INDEX = cast(func.substr(jobs.c.id, func.length(jobs.c.array_parent) + 2), BigInteger)


def list_rows(
    conn: Connection, filters: JobFilters, *, limit: int, before_seq: int | None
) -> list[Listed]:
    """The listing of the jobs ``filters`` asks for, with the waiting members combined,
    newest first, at most ``limit`` rows."""
    if limit < 1:
        raise ValueError(f"limit must be at least 1, got {limit}")
    apart = job_listing(filters, limit=limit, before_seq=before_seq, apart=True)
    if apart is None:
        return []
    singles = [job_row(m) for m in conn.execute(apart).mappings()]
    groups = _groups(conn, limit, before_seq, filters)
    merged: list[Listed] = [*singles, *groups]
    merged.sort(key=lambda r: (r.newest if isinstance(r, ArrayRow) else r).seq, reverse=True)
    return merged[:limit]


def _waiting(filters: JobFilters) -> Select[Any] | None:
    """The waiting members that ``filters`` lists (no order, no limit), walking the partial
    index of waiting members (``ix_jobs_waiting_members``, by array and reason: the order
    they are grouped in); every other filter is tested row by row."""
    if not matchable(filters):
        return None
    stmt = select().select_from(jobs).where(waiting_members(array_parent=filters.array_parent))
    if filters.users is not None:
        stmt = stmt.where(unindexed(jobs.c.user).in_(list(filters.users)))
    if filters.until is not None:  # (a waiting job has not ended: any ``since`` holds)
        stmt = stmt.where(jobs.c.submit_time <= filters.until)
    return filtered(
        stmt,
        filters,
        state=unindexed(jobs.c.state),
        queue_column=unindexed(jobs.c.queue),
        tenant_column=unindexed(jobs.c.tenant),
    )


def _groups(
    conn: Connection, limit: int, before_seq: int | None, filters: JobFilters
) -> list[ArrayRow]:
    """The newest ``limit`` groups of waiting members (by array and reason)."""
    waiting = _waiting(filters)
    if waiting is None:
        return []
    newest = func.max(jobs.c.seq)
    grouped = (
        waiting.add_columns(
            jobs.c.array_parent, jobs.c.reason, func.count(), newest, func.min(_INDEX)
        )
        .add_columns(func.max(_INDEX))
        .group_by(jobs.c.array_parent, jobs.c.reason)
        .order_by(newest.desc())
        .limit(limit)
    )
    if before_seq is not None:
        grouped = grouped.having(newest < before_seq)
    found = list(conn.execute(grouped))
    if not found:
        return []
    by_seq = {
        r.seq: r
        for r in map(
            job_row,
            conn.execute(select(jobs).where(jobs.c.seq.in_([g[3] for g in found]))).mappings(),
        )
    }
    broken: dict[tuple[str, str], int] = {}  # (array, reason): step, for those with gaps
    for parent, reason, count, seq, low, high in found:
        step = _step(by_seq[seq])
        if (high - low) % step or (high - low) // step + 1 != count:
            broken[(parent, reason)] = step
    indices = _indices(conn, waiting, broken)
    rows = []
    for parent, reason, count, seq, low, high in found:
        key = (parent, reason)
        if key in broken:
            ranges = capped(index_ranges(indices[key], broken[key]))
        else:
            ranges = run_text(low, high, _step(by_seq[seq]))
        rows.append(ArrayRow(by_seq[seq], ranges, count))
    return rows


def _indices(
    conn: Connection, waiting: Select[Any], groups: Collection[tuple[str, str]]
) -> dict[tuple[str, str], list[int]]:
    """The indices of the waiting members of ``groups`` (array, reason), read from their
    arrays' index."""
    found: dict[tuple[str, str], list[int]] = defaultdict(list)
    if not groups:
        return found
    parents = sorted({parent for parent, _ in groups})
    stmt = waiting.add_columns(jobs.c.array_parent, jobs.c.reason, _INDEX).where(
        jobs.c.array_parent.in_(parents)
    )
    for parent, reason, index in conn.execute(stmt):
        if (parent, reason) in groups:
            found[(parent, reason)].append(index)
    return found


def _array(row: JobRow) -> Mapping[str, Any]:
    spec = row.request.get("array")
    return spec if isinstance(spec, Mapping) else {}


def _step(row: JobRow) -> int:
    step = _array(row).get("step")
    return step if isinstance(step, int) and step >= 1 else 1
