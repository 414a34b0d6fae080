"""What a page of listed jobs shows beside their rows (``GET /v1/jobs?detail=true``, what
``fusesched sacct`` prints as job steps and ``Restarts``): their tasks (or, for ``steps=true``,
only the fields their steps' summaries read), and how many times each was requeued or
restarted in place; and some kinds of the events of many jobs (what a restarted controller
reads of the jobs it adopts).

Each is one query per :data:`CHUNK` jobs over an index on ``job_id`` (the tasks', the
events'), whatever the number of jobs: never a query per job.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Collection, Iterator, Sequence
from typing import Final

from sqlalchemy import Connection, func, select

from fusesched.model.step_summary import StepTask
from fusesched.store.convert import event_record, task_row
from fusesched.store.records import EventRecord, TaskRow
from fusesched.store.schema import events, tasks

#: The events that start a job's run again: the controller writes one each time it requeues
#: a job (preempted, a retried failure, ``scontrol requeue``, not adopted after a restart)
#: and each time it restarts one in place (controller/persist.py, controller/failures.py).
RESTART_EVENTS: Final = ("JobRequeued", "JobRestartedInPlace")
#: Job ids per query (well under any database's limit of bound parameters).
CHUNK: Final = 500


def tasks_by_job(conn: Connection, job_ids: Collection[str]) -> dict[str, list[TaskRow]]:
    """The tasks of ``job_ids`` (every run's), each job's in (group, index) order; a job
    without tasks has no key."""
    found: dict[str, list[TaskRow]] = defaultdict(list)
    order = (tasks.c.job_id, tasks.c.group, tasks.c.index)
    for part in _chunks(job_ids):
        stmt = select(tasks).where(tasks.c.job_id.in_(part)).order_by(*order)
        for m in conn.execute(stmt).mappings():
            found[m["job_id"]].append(task_row(m))
    return dict(found)


#: The columns of a task a step's summary reads (:class:`StepTask`'s fields).
_STEP_COLUMNS: Final = tuple(tasks.c[name] for name in StepTask.__dataclass_fields__)


def step_tasks_by_job(conn: Connection, job_ids: Collection[str]) -> dict[str, list[StepTask]]:
    """What the steps' summaries read of the tasks of ``job_ids`` (every run's; as
    :func:`tasks_by_job`, without the rest of each row)."""
    found: dict[str, list[StepTask]] = defaultdict(list)
    order = (tasks.c.job_id, tasks.c.group, tasks.c.index)
    for part in _chunks(job_ids):
        stmt = select(tasks.c.job_id, *_STEP_COLUMNS).where(tasks.c.job_id.in_(part))
        for job_id, *values in conn.execute(stmt.order_by(*order)):
            found[job_id].append(StepTask(*values))
    return dict(found)


def restart_counts(conn: Connection, job_ids: Collection[str]) -> dict[str, int]:
    """How many times each of ``job_ids`` was requeued or restarted in place (Slurm's
    ``Restarts``); a job never restarted has no key."""
    counts: dict[str, int] = {}
    for part in _chunks(job_ids):
        stmt = (
            select(events.c.job_id, func.count())
            .where(events.c.job_id.in_(part), events.c.kind.in_(RESTART_EVENTS))
            .group_by(events.c.job_id)
        )
        counts.update((str(job_id), int(n)) for job_id, n in conn.execute(stmt))
    return counts


def events_by_job(
    conn: Connection, job_ids: Collection[str], kinds: Collection[str]
) -> dict[str, list[EventRecord]]:
    """The events of ``job_ids`` of any of ``kinds``, each job's in the order they were added
    (by id); a job with none has no key."""
    found: dict[str, list[EventRecord]] = defaultdict(list)
    wanted = sorted(set(kinds))
    for part in _chunks(job_ids):
        stmt = select(events).where(events.c.job_id.in_(part), events.c.kind.in_(wanted))
        for m in conn.execute(stmt.order_by(events.c.id)).mappings():
            found[m["job_id"]].append(event_record(m))
    return dict(found)


def _chunks(job_ids: Collection[str]) -> Iterator[Sequence[str]]:
    ordered = sorted(set(job_ids))
    for start in range(0, len(ordered), CHUNK):
        yield ordered[start : start + CHUNK]
