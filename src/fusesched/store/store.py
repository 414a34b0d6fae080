"""The repository the controller calls: typed records in, typed records out.

Synchronous by design (the controller runs it in a worker thread); one :class:`Store` may be
shared by threads, each call takes its own pooled connection and its own transaction. A
batch call (``add_jobs``, ``update_jobs``, …) is one transaction: all of it or none of it.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Collection, Iterable, Mapping
from types import TracebackType
from typing import Any, Final

from sqlalchemy import func, insert, inspect, select, update
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.exc import IntegrityError

from fusesched.model.node import NodeState
from fusesched.model.step_summary import StepTask
from fusesched.store.array_rows import Listed, list_rows
from fusesched.store.batch import existing, merge, no_repeats, update_known, update_many
from fusesched.store.convert import (
    event_record,
    event_values,
    job_row,
    job_values,
    node_row,
    node_values,
    task_row,
    task_values,
)
from fusesched.store.dependency_lock import hold_for_submission, missing_dependencies
from fusesched.store.engine import sqlite_file
from fusesched.store.environments import (
    insert_environments,
    read_environments,
    split_environments,
)
from fusesched.store.errors import (
    DuplicateJob,
    DuplicateTask,
    NoStore,
    UnknownJob,
    UnknownNode,
    UnknownTask,
)
from fusesched.store.job_filters import ALL_JOBS, JobFilters
from fusesched.store.job_history import (
    events_by_job,
    restart_counts,
    step_tasks_by_job,
    tasks_by_job,
)
from fusesched.store.job_list import job_listing
from fusesched.store.migrate import upgrade_engine
from fusesched.store.records import (
    EventRecord,
    EventRow,
    JobChange,
    JobDetail,
    JobRow,
    JobState,
    NodeRow,
    TaskChange,
    TaskRow,
    node_state,
)
from fusesched.store.schema import JOB_SEQ, counters, events, jobs, nodes, tasks, unfinished
from fusesched.store.token_store import TokenStore

#: Index entries SQLite's ANALYZE samples per index (it estimates from the sample).
SQLITE_ANALYSIS_ROWS: Final = 2000


class Store(TokenStore):
    """The persistent store at ``url`` (``sqlite:///path.db`` or ``postgresql+psycopg://…``).

    With ``migrate`` (the default) the schema is created or upgraded on opening. Its tokens'
    methods are :class:`~.token_store.TokenStore`'s.
    """

    def __init__(self, url: str, *, migrate: bool = True) -> None:
        super().__init__(url)
        if migrate:
            upgrade_engine(self._engine)

    @classmethod
    def existing(cls, url: str) -> Store:
        """The store at ``url`` as it is, to read (reports): :class:`NoStore` when there is
        none, and nothing is created (no SQLite file, no tables) or upgraded."""
        path = sqlite_file(url)
        if path is not None and not path.is_file():
            raise NoStore(f"no store at {path}")
        store = cls(url, migrate=False)
        try:
            with store._read() as conn:
                found = inspect(conn).has_table(jobs.name)
        except BaseException:
            store.close()
            raise
        if not found:
            store.close()
            raise NoStore(f"no store at {url} (the database holds no fusesched tables)")
        return store

    def __enter__(self) -> Store:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        self.close()

    # ----------------------------------------------------------------------- jobs

    def next_job_seq(self, n: int = 1) -> range:
        """Allocate ``n`` consecutive job sequence numbers, atomically across threads and
        processes. Numbers start at 1 and are never handed out twice."""
        if n < 1:
            raise ValueError(f"n must be at least 1, got {n}")
        stmt = (
            update(counters)
            .where(counters.c.name == JOB_SEQ)
            .values(value=counters.c.value + n)
            .returning(counters.c.value)
        )
        with self._write() as conn:
            last: int = conn.execute(stmt).scalar_one()
        return range(last - n + 1, last + 1)

    def return_job_seqs(self, first: int, last: int) -> bool:
        """Give back the unused numbers ``first..last`` of the last block this process took
        (:meth:`next_job_seq`), so that numbering goes on from ``first`` after a clean
        restart. Only while nobody has taken numbers since (the counter still reads
        ``last``): returns whether they were given back."""
        if first < 1 or last < first:
            return False
        stmt = (
            update(counters)
            .where((counters.c.name == JOB_SEQ) & (counters.c.value == last))
            .values(value=first - 1)
        )
        with self._write() as conn:
            return conn.execute(stmt).rowcount == 1

    def add_jobs(self, rows: Iterable[JobRow]) -> int:
        """Insert jobs in one transaction. An id or seq that is already stored, or repeated in
        ``rows``, raises :class:`DuplicateJob` and inserts nothing; so does a dependency on a
        job no longer stored (:class:`~.dependency_lock.PurgedDependency`: purged after the
        submission checked it). Returns the count."""
        batch = [job_values(r) for r in rows]
        if not batch:
            return 0
        no_repeats([v["id"] for v in batch], DuplicateJob)
        no_repeats([str(v["seq"]) for v in batch], DuplicateJob, "seq used twice in one batch")
        found = split_environments(batch)  # (each kept once, apart from the requests)
        try:
            with self._write() as conn:
                # (a purge's deletions and this batch's dependencies: store/dependency_lock.py)
                wanted = hold_for_submission(conn, batch)
                insert_environments(conn, found)
                conn.execute(insert(jobs), batch)
                missing_dependencies(conn, wanted)
                # Keep the counter above every stored seq, even ones not allocated here. (No
                # row lock unless it moves, so seq allocation does not wait for this batch.)
                top = max(v["seq"] for v in batch)
                seq_row = (counters.c.name == JOB_SEQ) & (counters.c.value < top)
                conn.execute(update(counters).where(seq_row).values(value=top))
        except IntegrityError as error:
            conflict = self._job_conflict(batch)
            if conflict is None:
                raise
            raise conflict from error
        return len(batch)

    def environments(self, keys: Iterable[str | None]) -> dict[str, dict[str, str]]:
        """The submitting environments kept under ``keys`` (jobs' ``env_id``; None and
        unknown keys left out): :func:`fusesched.controller.records.stored_request` puts
        one back into its job's request."""
        with self._read() as conn:
            return read_environments(conn, keys)

    def _job_conflict(self, batch: list[dict[str, Any]]) -> DuplicateJob | None:
        """Why inserting ``batch`` broke a unique constraint: a stored id, or a stored seq."""
        with self._read() as conn:
            stored = existing(conn, jobs.c.id, [v["id"] for v in batch])
            if stored:
                return DuplicateJob(stored)
            seqs = existing(conn, jobs.c.seq, [v["seq"] for v in batch])
        clashes = [v["id"] for v in batch if v["seq"] in seqs]
        return DuplicateJob(clashes, "seq already used") if clashes else None

    def update_jobs(self, changes: Iterable[JobChange]) -> int:
        """Apply changes in one transaction (several changes of one job apply in order). An
        unknown id raises :class:`UnknownJob` and changes nothing. Returns the jobs changed."""
        merged = merge((c.id, c.values()) for c in changes)
        with self._write() as conn:
            return update_known(conn, jobs, jobs.c.id, merged, UnknownJob)

    def get_job(self, job_id: str) -> JobDetail | None:
        """One job with its tasks, or ``None`` when there is no such job."""
        with self._read() as conn:
            found = conn.execute(select(jobs).where(jobs.c.id == job_id)).mappings().first()
            if found is None:
                return None
            stmt = select(tasks).where(tasks.c.job_id == job_id).order_by(*_TASK_ORDER)
            task_rows = tuple(task_row(m) for m in conn.execute(stmt).mappings())
        return JobDetail(job_row(found), task_rows)

    def list_jobs(
        self, filters: JobFilters = ALL_JOBS, *, limit: int = 50, before_seq: int | None = None
    ) -> list[JobRow]:
        """The jobs ``filters`` asks for (:class:`~.job_filters.JobFilters`), newest first
        (by seq), at most ``limit``. For the next page pass the last row's seq as
        ``before_seq``. The query, and the index it walks: :mod:`.job_list`."""
        stmt = job_listing(filters, limit=limit, before_seq=before_seq)
        if stmt is None:
            return []
        with self._read() as conn:
            return [job_row(m) for m in conn.execute(stmt).mappings()]

    def list_job_rows(
        self, filters: JobFilters = ALL_JOBS, *, limit: int = 50, before_seq: int | None = None
    ) -> list[Listed]:
        """:meth:`list_jobs` as squeue shows it: each array's members that wait and never
        started, and wait for the same reason, as one :class:`~.array_rows.ArrayRow` (at the
        newest one's place); ``limit`` counts rows."""
        with self._read() as conn:
            return list_rows(conn, filters, limit=limit, before_seq=before_seq)

    def member_phases(self, array_parent: str, phases: Collection[str]) -> dict[str, str]:
        """The phase of each member of array ``array_parent`` that is in one of ``phases``, by
        id (two columns, not whole rows: an array may have a million members)."""
        stmt = select(jobs.c.id, jobs.c.phase).where(
            jobs.c.array_parent == array_parent, jobs.c.phase.in_(sorted(phases))
        )
        with self._read() as conn:
            return {job_id: phase for job_id, phase in conn.execute(stmt)}

    def count_jobs_by_state(self) -> dict[JobState, int]:
        """How many jobs are in each state (every state is a key, zero included)."""
        stmt = select(jobs.c.state, func.count()).group_by(jobs.c.state)
        with self._read() as conn:
            found = {JobState(s): n for s, n in conn.execute(stmt)}
        return {s: found.get(s, 0) for s in JobState}

    def unfinished_jobs(self) -> list[JobDetail]:
        """Pending and Running jobs with their tasks, oldest first: what a restarting
        controller must pick up again."""
        job_stmt = select(jobs).where(unfinished(jobs.c.state)).order_by(jobs.c.seq)
        live_ids = select(jobs.c.id).where(unfinished(jobs.c.state))
        task_stmt = select(tasks).where(tasks.c.job_id.in_(live_ids)).order_by(*_TASK_ORDER)
        with self._read() as conn:
            found = [job_row(m) for m in conn.execute(job_stmt).mappings()]
            by_job: dict[str, list[TaskRow]] = defaultdict(list)
            for m in conn.execute(task_stmt).mappings():
                by_job[m["job_id"]].append(task_row(m))
        return [JobDetail(j, tuple(by_job.get(j.id, ()))) for j in found]

    # ----------------------------------------------------------------------- tasks

    def add_tasks(self, rows: Iterable[TaskRow]) -> int:
        """Insert tasks in one transaction: :class:`DuplicateTask` for a task id already
        stored or repeated, :class:`UnknownJob` for a task of a job not stored."""
        batch = [task_values(r) for r in rows]
        if not batch:
            return 0
        no_repeats([v["task_id"] for v in batch], DuplicateTask)
        try:
            with self._write() as conn:
                conn.execute(insert(tasks), batch)
        except IntegrityError as error:
            self._task_conflict(batch, error)
            raise
        return len(batch)

    def update_tasks(self, changes: Iterable[TaskChange]) -> int:
        """Like :meth:`update_jobs`, for tasks (:class:`UnknownTask` for an unknown id)."""
        merged = merge((c.task_id, c.values()) for c in changes)
        with self._write() as conn:
            return update_known(conn, tasks, tasks.c.task_id, merged, UnknownTask)

    def write_changes(
        self,
        *,
        new_tasks: Iterable[TaskRow] = (),
        job_changes: Iterable[JobChange] = (),
        task_changes: Iterable[TaskChange] = (),
        new_events: Iterable[EventRow] = (),
    ) -> None:
        """:meth:`add_tasks`, :meth:`update_jobs`, :meth:`update_tasks` and
        :meth:`add_events`, in this order, in one transaction: all of it or none of it (the
        same errors as each of them). What a controller's cycle or heartbeat changed costs one
        commit, not one per kind of row."""
        task_batch = [task_values(r) for r in new_tasks]
        no_repeats([v["task_id"] for v in task_batch], DuplicateTask)
        job_merged = merge((c.id, c.values()) for c in job_changes)
        task_merged = merge((c.task_id, c.values()) for c in task_changes)
        event_batch = [event_values(r) for r in new_events]
        if not (task_batch or job_merged or task_merged or event_batch):
            return
        try:
            with self._write() as conn:
                if task_batch:
                    conn.execute(insert(tasks), task_batch)
                if job_merged:
                    update_known(conn, jobs, jobs.c.id, job_merged, UnknownJob)
                if task_merged:
                    update_known(conn, tasks, tasks.c.task_id, task_merged, UnknownTask)
                if event_batch:
                    conn.execute(insert(events), event_batch)
        except IntegrityError as error:
            if task_batch:
                self._task_conflict(task_batch, error)
            raise

    def _task_conflict(self, batch: list[dict[str, Any]], error: IntegrityError) -> None:
        """Raise :class:`DuplicateTask` or :class:`UnknownJob` for an insert of ``batch``
        that failed with ``error``, if that is why it failed."""
        with self._read() as conn:
            stored = existing(conn, tasks.c.task_id, [v["task_id"] for v in batch])
            job_ids = {v["job_id"] for v in batch}
            missing = job_ids - existing(conn, jobs.c.id, list(job_ids))
        if stored:
            raise DuplicateTask(stored) from error
        if missing:
            raise UnknownJob(missing) from error

    def tasks_for_job(self, job_id: str) -> list[TaskRow]:
        """The job's tasks in (group, index) order; empty for an unknown job."""
        stmt = select(tasks).where(tasks.c.job_id == job_id).order_by(*_TASK_ORDER)
        with self._read() as conn:
            return [task_row(m) for m in conn.execute(stmt).mappings()]

    def tasks_of_jobs(self, job_ids: Collection[str]) -> dict[str, list[TaskRow]]:
        """The tasks of each of ``job_ids`` (every run's), in (group, index) order; a job
        with none (or unknown) has no key. See :mod:`~fusesched.store.job_history`."""
        with self._read() as conn:
            return tasks_by_job(conn, job_ids)

    def step_tasks_of_jobs(self, job_ids: Collection[str]) -> dict[str, list[StepTask]]:
        """What the summaries of the steps of ``job_ids`` read of their tasks (``GET
        /v1/jobs?steps=true``); see :mod:`~fusesched.store.job_history`."""
        with self._read() as conn:
            return step_tasks_by_job(conn, job_ids)

    def restarts(self, job_ids: Collection[str]) -> dict[str, int]:
        """How many times each of ``job_ids`` was requeued or restarted in place; a job
        never restarted (or unknown) has no key."""
        with self._read() as conn:
            return restart_counts(conn, job_ids)

    def tasks_on_node(
        self, node: str, states: Collection[JobState | str] | None = None
    ) -> list[TaskRow]:
        """Tasks placed on ``node`` (in any of ``states`` when given), by job and index."""
        stmt = select(tasks).where(tasks.c.node == node)
        if states is not None:
            stmt = stmt.where(tasks.c.state.in_(sorted({JobState.parse(s).value for s in states})))
        with self._read() as conn:
            return [task_row(m) for m in conn.execute(stmt.order_by(*_TASK_ORDER)).mappings()]

    # ----------------------------------------------------------------------- nodes

    def upsert_node(self, row: NodeRow) -> None:
        """Register a node, or replace every field of the stored one (re-registration) but
        its operator drain (:meth:`set_node_drain`), which outlives agent restarts."""
        values = node_values(row)
        dialect_insert = pg_insert if self._engine.dialect.name == "postgresql" else sqlite_insert
        stmt = dialect_insert(nodes).values(values)
        stmt = stmt.on_conflict_do_update(
            index_elements=[nodes.c.name],
            set_={k: stmt.excluded[k] for k in values if k not in ("name", "drain_reason")},
        )
        with self._write() as conn:
            conn.execute(stmt)

    def get_node(self, name: str) -> NodeRow | None:
        with self._read() as conn:
            found = conn.execute(select(nodes).where(nodes.c.name == name)).mappings().first()
        return None if found is None else node_row(found)

    def list_nodes(self) -> list[NodeRow]:
        """Every registered node, by name."""
        with self._read() as conn:
            return [
                node_row(m) for m in conn.execute(select(nodes).order_by(nodes.c.name)).mappings()
            ]

    def set_node_state(self, name: str, state: NodeState | str) -> None:
        """Change a node's state; :class:`UnknownNode` when it is not registered."""
        stmt = update(nodes).where(nodes.c.name == name).values(state=node_state(state).value)
        with self._write() as conn:
            if conn.execute(stmt).rowcount != 1:
                raise UnknownNode([name])

    def set_node_drain(self, name: str, reason: str | None) -> None:
        """Record an operator's drain of ``name`` (``None``: undrained); :class:`UnknownNode`
        when it is not registered."""
        stmt = update(nodes).where(nodes.c.name == name).values(drain_reason=reason)
        with self._write() as conn:
            if conn.execute(stmt).rowcount != 1:
                raise UnknownNode([name])

    def touch_node(self, name: str, time: float) -> None:
        """Record a heartbeat from ``name`` at ``time``."""
        self.touch_nodes({name: time})

    def touch_nodes(self, times: Mapping[str, float]) -> None:
        """Record many heartbeats in one transaction; :class:`UnknownNode` (and nothing
        recorded) when one of the nodes is not registered."""
        merged = {name: {"last_heartbeat": t} for name, t in times.items()}
        with self._write() as conn:
            if update_many(conn, nodes, nodes.c.name, merged) != len(merged):
                raise UnknownNode(set(merged) - existing(conn, nodes.c.name, list(merged)))

    # ----------------------------------------------------------------------- events

    def add_events(self, rows: Iterable[EventRow]) -> int:
        """Append events to the log in one transaction. Returns the count."""
        batch = [event_values(r) for r in rows]
        if batch:
            with self._write() as conn:
                conn.execute(insert(events), batch)
        return len(batch)

    def events_for_job(self, job_id: str) -> list[EventRecord]:
        """The job's events in the order they were added."""
        stmt = select(events).where(events.c.job_id == job_id).order_by(events.c.id)
        with self._read() as conn:
            return [event_record(m) for m in conn.execute(stmt).mappings()]

    def events_of_jobs(
        self, job_ids: Collection[str], kinds: Collection[str]
    ) -> dict[str, list[EventRecord]]:
        """The events of ``job_ids`` of any of ``kinds``, each job's in the order they were
        added (a job with none has no key): one query per 500 jobs, not one per job."""
        with self._read() as conn:
            return events_by_job(conn, job_ids, kinds)

    # ----------------------------------------------------------------------- upkeep

    def optimize(self) -> None:
        """Refresh the query planner's statistics (``ANALYZE``; on SQLite sampled, so it takes
        well under a second at a million jobs). Worth calling after a bulk load and, say,
        daily; PostgreSQL's autovacuum also does it on its own."""
        with self._write() as conn:
            if self._engine.dialect.name == "sqlite":
                conn.exec_driver_sql(f"PRAGMA analysis_limit={SQLITE_ANALYSIS_ROWS}")
            conn.exec_driver_sql("ANALYZE")


_TASK_ORDER: Final = (tasks.c.job_id, tasks.c.group, tasks.c.index)
