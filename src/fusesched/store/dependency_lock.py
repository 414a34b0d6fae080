"""The lock that keeps a purge (store/purge.py) from deleting a job that a job being submitted
depends on, and the check that refuses a submission whose dependency was purged meanwhile.

**The race.** A purge's deleting transaction reads the waiting jobs' dependencies, then
deletes the jobs of its batch none of them names. A submission checks its dependencies in the
controller (reads of their own), then inserts its jobs. Two windows are open:

1. at READ COMMITTED (PostgreSQL), a submission that commits between the purge's read and its
   delete is not seen by the read, and its dependency is deleted (SQLite has no such window:
   its writers are serialised, and the purge's read and delete are one write transaction);
2. on both databases, a purge that commits between the submission's check and its insert
   deletes the dependency the check saw.

Either leaves a waiting job that names a job no longer stored: a restarted controller cannot
settle that dependency (controller/dependencies.py).

**The scheme.** On PostgreSQL, one transaction-scoped advisory lock (:data:`KEY`): the
purge's deleting transaction takes it exclusively (:func:`hold_for_purge`) as its first
statement, before it reads the dependencies; an insert of jobs that name dependencies takes
it shared (:func:`hold_for_submission`) as its first statement, and before it commits checks
that every job it depends on is still stored (:func:`missing_dependencies`). Each side holds it
until its commit, so the two are ordered:

* the insert first: the purge waits for its commit, and its read of the dependencies (a later
  statement, so a later snapshot at READ COMMITTED) sees the new job — the job stays;
* the purge first: the insert waits for its commit, and its check (a later snapshot) does not
  find the purged job — the submission is refused (:class:`PurgedDependency`), nothing stored.

SQLite needs no advisory lock: both are write transactions (``BEGIN IMMEDIATE``), one after
the other, and the insert's check runs in its own. Submissions do not wait for one another
(the lock is shared among them), nor does any other write; a submission with dependencies
waits at most for one batch of a purge. Neither side holds a row lock when it asks for the
advisory lock, so no deadlock can form around it.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Mapping
from typing import Any, Final

from sqlalchemy import Connection, select, text

from fusesched.store.errors import UnknownJob
from fusesched.store.schema import jobs

#: The advisory lock's key ("fuse" "purg" as a 64-bit integer): shared by every fusesched
#: store in one PostgreSQL database (stores in other schemas of it wait for each other's
#: purges too, harmlessly).
KEY: Final = 0x6675_7365_7075_7267
#: Ids per ``IN (...)`` list.
_CHUNK: Final = 500


class PurgedDependency(UnknownJob):
    """Jobs being stored depend on jobs the store no longer has (a purge removed them after
    the submission checked them)."""

    problem = "named as a dependency but no longer stored (its record was purged meanwhile)"


def hold_for_purge(conn: Connection) -> None:
    """Take the lock for a purge's deleting transaction (PostgreSQL; until it ends)."""
    if conn.dialect.name == "postgresql":
        conn.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": KEY})


def hold_for_submission(conn: Connection, rows: Iterable[Mapping[str, Any]]) -> set[str]:
    """The jobs ``rows`` (job values about to be inserted) depend on; when there are any, the
    lock is taken shared (PostgreSQL; until the transaction ends)."""
    wanted = {dep for values in rows for dep in dependency_ids(values.get("request"))}
    if wanted and conn.dialect.name == "postgresql":
        conn.execute(text("SELECT pg_advisory_xact_lock_shared(:key)"), {"key": KEY})
    return wanted


def missing_dependencies(conn: Connection, wanted: Iterable[str]) -> None:
    """:class:`PurgedDependency` unless each of ``wanted`` is a stored job or array (run
    after the insert, so a dependency on a job of the same batch is found)."""
    left = set(wanted)
    ordered = sorted(left)
    for start in range(0, len(ordered), _CHUNK):
        chunk = ordered[start : start + _CHUNK]
        left.difference_update(
            conn.execute(select(jobs.c.id).where(jobs.c.id.in_(chunk))).scalars()
        )
        parents = select(jobs.c.array_parent).where(jobs.c.array_parent.in_(chunk)).distinct()
        left.difference_update(conn.execute(parents).scalars())
    if left:
        raise PurgedDependency(left)


def dependency_ids(found: object) -> Iterator[str]:
    """The job ids a stored request's ``dependencies`` name (the request, its dependencies as
    JSON text, or decoded)."""
    if isinstance(found, Mapping):
        found = found.get("dependencies")
    if isinstance(found, str):
        try:
            found = json.loads(found)
        except ValueError:
            return
    if not isinstance(found, list):
        return
    for dep in found:
        job_id = dep.get("job_id") if isinstance(dep, dict) else None
        if isinstance(job_id, str) and job_id:
            yield job_id
