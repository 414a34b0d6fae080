"""The runs that ended, as fair share charges them: what a restarted controller hands its
scheduling core (:class:`~fusesched.model.events.UsageRecalled`, see
:mod:`fusesched.core.past_usage`) so that fair share goes on from the usage it had.

A job row holds its latest run only: ``[start_time, end_time]`` of a job that ended
(Completed, Failed or Cancelled) after it started on some nodes. A job requeued and ended
without running again shows no nodes (its requeue cleared them), and its start is that of a
run whose end the row does not hold: it counts nothing; nor do the earlier runs of a job
requeued, or a job still pending or running (the core charges a job it adopts from its
start). The jobs are read through the index on ``end_time``, with their resources as
:data:`~fusesched.store.usage_shapes.RESOURCES` gives them cheaply; the runs are grouped by
account and shape, each distinct shape read once (:func:`~fusesched.store.usage_shapes.job_total`).
"""

from __future__ import annotations

import math
from typing import Final

from sqlalchemy import Double, String, cast, literal, select

from fusesched.model.events import EndedRuns
from fusesched.store.records import UNFINISHED
from fusesched.store.schema import jobs
from fusesched.store.store import Store
from fusesched.store.usage_shapes import RESOURCES, in_blocks, job_total, shape_key

_UNFINISHED: Final = tuple(s.value for s in UNFINISHED)


def ended_runs(store: Store, since: float) -> list[EndedRuns]:
    """The runs of the jobs that ended at ``since`` or later (``-inf``: all), grouped by
    the jobs' tenant, queue and user and what they held."""
    grouped: dict[tuple[str, str, str, str | None], list[tuple[float, float]]] = {}
    with store._read() as conn:  # the store's own read connection (same package)
        stmt = select(
            jobs.c.tenant,
            jobs.c.queue,
            jobs.c.user,
            jobs.c.start_time,
            jobs.c.end_time,
            RESOURCES[conn.dialect.name],
        ).where(
            # (NOT IN: an ``IN`` of the ended states would lead SQLite to walk the state
            # index, every ended job of all time, rather than the end times since ``since``)
            jobs.c.state.not_in(_UNFINISHED),
            jobs.c.start_time.is_not(None),
            jobs.c.end_time.is_not(None),
            cast(jobs.c.nodes, String) != "[]",  # (cheaper than reading the JSON)
        )
        if not math.isinf(since):
            stmt = stmt.where(jobs.c.end_time >= literal(since, Double))
        for tenant, queue, user, start, end, resources in in_blocks(conn, stmt):
            key = (tenant, queue, user, shape_key(resources))
            spans = grouped.get(key)
            if spans is None:
                grouped[key] = [(start, end)]
            else:
                spans.append((start, end))
    return [
        EndedRuns(tenant, queue, user, job_total(shape), tuple(spans))
        for (tenant, queue, user, shape), spans in grouped.items()
    ]
