"""Everything the controller writes to and reads from the store.

Submissions are written at once (the id returned to the user is durable); the changes a
scheduling cycle or a heartbeat makes (starts, exits, task rows, events) are collected and
written together by :meth:`Persistence.flush` in one transaction, so a busy cycle (or a
heartbeat) costs one commit instead of several per job.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from functools import partial
from typing import TYPE_CHECKING, Any

from sqlalchemy.exc import OperationalError, SQLAlchemyError

from fusesched.api.job_schemas import JobView
from fusesched.api.wire import NodeInventory
from fusesched.controller import reservations
from fusesched.controller.holds import ADMIN_PREFIX, AT_SUBMIT, HELD, USER_PREFIX
from fusesched.controller.job_numbers import JobNumbers
from fusesched.controller.job_steps import step_name, step_of, step_tasks
from fusesched.controller.job_view import job_view, listed_views, row_views
from fusesched.controller.wait_reasons import WaitReasons
from fusesched.model.job import JobSpec
from fusesched.model.node import NodeState
from fusesched.model.phases import JobPhase
from fusesched.store.dependency_lock import PurgedDependency
from fusesched.store.environments import FIELD as ENV_FIELD
from fusesched.store.errors import StoreError
from fusesched.store.job_filters import ALL_JOBS, JobFilters
from fusesched.store.records import (
    UNSET,
    EventRow,
    JobChange,
    JobDetail,
    JobRow,
    JobState,
    NodeRow,
    TaskChange,
    TaskRow,
)
from fusesched.store.store import Store
from fusesched.submit.begin import begin_reason
from fusesched.submit.errors import SubmitError
from fusesched.submit.request import JobRequest

if TYPE_CHECKING:
    from fusesched.controller.notify import JobNotices
    from fusesched.controller.records import LiveTask
    from fusesched.controller.task_usage import TaskUsage


log = logging.getLogger(__name__)

#: what the store raises for a change it refuses (not for a database that is away): the
#: change is dropped, never kept to block every later write
_REFUSED: tuple[type[Exception], ...] = (StoreError, SQLAlchemyError, OverflowError)
_REFUSED_OR_AWAY: tuple[type[Exception], ...] = (*_REFUSED, OSError)


class Persistence:
    def __init__(self, url: str) -> None:
        self.store = Store(url)
        self._job_changes: list[JobChange] = []
        self._new_tasks: list[TaskRow] = []
        self._task_changes: list[TaskChange] = []
        self._events: list[EventRow] = []
        self._waits = WaitReasons()  # (which stored reasons the core gave: wait_reasons)
        self._numbers = JobNumbers(self.store)
        # told of every job transition written here (the controller sets it): notifications
        self.notices: JobNotices | None = None

    def close(self) -> None:
        """The last flush, then the unused rest of the block of job numbers is given back
        (a clean stop does not skip numbers: the next controller goes on from here)."""
        self.flush()
        try:
            self._numbers.give_back()
        except _REFUSED_OR_AWAY:
            log.warning(
                "could not give back job numbers %d..: they are skipped", self._numbers.next
            )
        self.store.close()

    # ------------------------------------------------------------------ writes

    def allocate_seqs(self, n: int) -> int:
        """The first of ``n`` new job numbers, from a block reserved from the store
        (:class:`~fusesched.controller.job_numbers.JobNumbers`)."""
        return self._numbers.allocate(n)

    def release_seqs(self, first: int, n: int) -> None:
        """Give back the numbers of the last :meth:`allocate_seqs` (a refused submission), so
        that the next job takes them and refusals leave no gaps."""
        self._numbers.release(first, n)

    def jobs_submitted(
        self, seqs: Sequence[int], request: JobRequest, specs: Sequence[JobSpec], now: float
    ) -> None:
        data = request.model_dump(mode="json", exclude_none=True)
        reason = ""
        if request.hold:
            reason = f"held: {AT_SUBMIT}"
        elif request.begin_time is not None and request.begin_time > now:
            reason = begin_reason(request.begin_time)  # waits for it (sbatch --begin)
        elif request.reservation is not None:  # waits for its window, if ahead
            reason = reservations.waiting_reason(self.store, request.reservation, now)
        rows = [
            JobRow(
                id=spec.id,
                seq=seq,
                user=spec.user,
                state=JobState.PENDING,
                phase=HELD if request.hold else JobPhase.PENDING.value,
                reason=reason,
                submit_time=now,
                request=data,
                name=spec.name,
                tenant=spec.tenant,
                queue=spec.queue,
                type=spec.type.value,
                priority=spec.priority,
                array_parent=spec.array_parent,
            )
            for seq, spec in zip(seqs, specs, strict=True)
        ]
        try:
            self.store.add_jobs(rows)  # durable before the id is returned
        except PurgedDependency as gone:  # (a purge removed it after the checks)
            why = f"dependency on unknown job {gone.ids[0]!r} (its record was purged meanwhile)"
            raise SubmitError(why) from gone
        if request.notify is not None and self.notices is not None:
            self.notices.submitted(request, specs)
        self._events.extend(
            EventRow(now, "JobSubmitted", job_id=spec.id, data={"user": spec.user})
            for spec in specs
        )

    def job_started(
        self,
        job_id: str,
        nodes: Sequence[str],
        now: float,
        tasks: Sequence[LiveTask],
        pool: str | None = None,
    ) -> None:
        """A job started; the reason it waited for (:meth:`wait_reasons`) is cleared."""
        waited = self._waits.forget(job_id)
        self._job_changes.append(
            JobChange(
                job_id,
                state=JobState.RUNNING,
                phase=JobPhase.RUNNING.value,
                start_time=now,
                nodes=tuple(nodes),
                pool=pool,
                reason="" if waited else UNSET,
            )
        )
        self.tasks_started(job_id, tasks, now)
        self._events.append(EventRow(now, "JobStarted", job_id=job_id, data={"nodes": nodes}))
        if self.notices is not None and self.notices.watches(job_id):
            self.notices.started(job_id, nodes, now)

    def job_start_time(self, job_id: str, start: float) -> None:
        """The run really began at ``start`` (an external cluster started it after queueing
        it): usage is charged from then."""
        self._job_changes.append(JobChange(job_id, start_time=start))
        if self.notices is not None and self.notices.watches(job_id):
            self.notices.start_time(job_id, start)

    def tasks_started(self, job_id: str, tasks: Sequence[LiveTask], now: float) -> None:
        for task in tasks:
            _, group, index = task.launch.task_id.rsplit(".", 2)
            self._new_tasks.append(
                TaskRow(
                    task_id=task.launch.task_id,
                    job_id=job_id,
                    group=group,
                    index=int(index),
                    state=JobState.RUNNING,
                    node=task.node,
                    start_time=now,
                    devices=_devices(task),
                    step_id=step_of(task.launch.env),
                    step_tasks=step_tasks(task.launch.env),
                    step_name=step_name(task.launch.env),
                )
            )

    def task_handed_over(self, task_id: str, external_id: str) -> None:
        """An external cluster accepted the job this task stands for, as ``external_id``."""
        self._task_changes.append(TaskChange(task_id, external_id=external_id))

    def task_ended(self, task: LiveTask, now: float) -> None:
        state = JobState.COMPLETED if task.exit_code == 0 else JobState.FAILED
        self._task_changes.append(
            TaskChange(
                task.launch.task_id,
                state=state,
                exit_code=task.exit_code,
                pid=task.pid,
                end_time=now,
                reason=task.reason or None,
            )
        )

    def task_usage(self, task_id: str, usage: TaskUsage) -> None:
        """What a task used (its agent's samples), written with its end."""
        self._task_changes.append(
            TaskChange(
                task_id,
                cpu_seconds=usage.cpu_seconds,
                max_rss_bytes=usage.max_rss_bytes,
                gpu_util_mean=usage.gpu_util_mean,
                max_gpu_memory_bytes=usage.max_gpu_memory_bytes,
            )
        )

    def job_requeued(
        self, job_id: str, phase: JobPhase, reason: str, attempt: int, now: float
    ) -> None:
        """A run ended by preemption or a retried failure: the job waits again (Pending)."""
        self._waits.requeued(job_id, reason)
        self._job_changes.append(
            JobChange(job_id, state=JobState.PENDING, phase=phase.value, reason=reason, nodes=())
        )
        self._events.append(
            EventRow(now, "JobRequeued", job_id=job_id, data={"reason": reason, "attempt": attempt})
        )
        if self.notices is not None and self.notices.watches(job_id):
            self.notices.requeued(job_id, reason, now)

    def job_reopened(self, job_id: str) -> None:
        """An ended job requeued on request (controller/ended_requeue.py): its last run's end
        and exit code are cleared (:meth:`job_requeued` writes the rest)."""
        self._job_changes.append(JobChange(job_id, end_time=None, exit_code=None))

    def job_energy(self, job_id: str, total_j: float, measured_j: float) -> None:
        """What the job's run drew (docs/METRICS.md: measured where GPUs report power)."""
        self._job_changes.append(JobChange(job_id, energy_j=total_j, energy_measured_j=measured_j))

    def job_reason(self, job_id: str, reason: str) -> None:
        """Why a job is where it is (a running one waiting in an external cluster's queue,
        one waiting for its reservation's window)."""
        self._waits.forget(job_id)
        self._job_changes.append(JobChange(job_id, reason=reason))

    def wait_reasons(self, reasons: Mapping[str, str]) -> None:
        """Why the waiting jobs wait, as the core explains it (``Resources``, ``Priority``…:
        :mod:`fusesched.core.pending_reasons`): written for the jobs whose reason changed
        since the last call, and cleared for those it no longer explains — not rewritten
        every cycle. Reasons written otherwise (a hold, a begin time) are the core's to
        replace only once it explains the job again; a requeued job's stays after it
        (``Resources; requeued (preempted for job 12 …)``) until it starts
        (:class:`~fusesched.controller.wait_reasons.WaitReasons`)."""
        self._job_changes.extend(self._waits.changes(reasons))

    def recovered_wait(self, job_id: str) -> None:
        """A waiting job recovered after a restart, its stored reason one the core gave
        (:func:`~fusesched.core.pending_reasons.given`): cleared when it starts, as if
        :meth:`wait_reasons` had written it."""
        self._waits.recovered(job_id)

    def job_updated(
        self,
        job_id: str,
        priority: int,
        request: Mapping[str, Any],
        changes: Mapping[str, Any],
        now: float,
        name: str | None = None,
        queue: str | None = None,
    ) -> None:
        """A job changed (scontrol update: controller/updates.py): its row — its priority,
        and its ``name`` and ``queue`` when they changed (None: kept) — and stored request
        (what a restarted controller recovers it from), and an event saying what changed."""
        kept = {k: v for k, v in request.items() if k != ENV_FIELD}  # (its env_id stays)
        columns: dict[str, Any] = {"name": name, "queue": queue}
        renamed = {k: v for k, v in columns.items() if v is not None}
        self._job_changes.append(JobChange(job_id, priority=priority, request=kept, **renamed))
        shown = {k: str(v) for k, v in changes.items()}
        self._events.append(EventRow(now, "JobUpdated", job_id=job_id, data=shown))
        if self.notices is not None and self.notices.watches(job_id):
            self.notices.updated(job_id, request)

    def job_held(
        self,
        job_id: str,
        reason: str | None,
        phase: str,
        now: float,
        by_admin: bool = False,
        begin_time: float | None = None,
    ) -> None:
        """A waiting job held for ``reason`` (``by_admin``: an administrator's hold, stored as
        such in its reason), or released (``None``), now in ``phase``; a released job whose
        ``begin_time`` is ahead says it waits for it."""
        self._waits.forget(job_id)
        if reason is not None:
            why = f"{ADMIN_PREFIX if by_admin else USER_PREFIX}{reason}"
            change = JobChange(job_id, state=JobState.PENDING, phase=phase, reason=why)
            data = {"reason": reason, **({"by": "administrator"} if by_admin else {})}
            event = EventRow(now, "JobHeld", job_id=job_id, data=data)
        else:
            waits = begin_time is not None and begin_time > now
            said = begin_reason(begin_time) if waits and begin_time is not None else "released"
            change = JobChange(job_id, phase=phase, reason=said)
            event = EventRow(now, "JobReleased", job_id=job_id)
        self._job_changes.append(change)
        self._events.append(event)

    def job_event(self, job_id: str, kind: str, reason: str, now: float) -> None:
        """Something happened to a job that does not change its state (a notice, a hang)."""
        self._events.append(EventRow(now, kind, job_id=job_id, data={"reason": reason}))

    def job_finished(
        self,
        job_id: str,
        phase: JobPhase,
        exit_code: int | None,
        reason: str,
        now: float,
    ) -> None:
        """A job ended: it ran, or was cancelled or rejected before it could."""
        self._waits.forget(job_id)
        state = JobState.of_phase(phase)
        self._job_changes.append(
            JobChange(
                job_id,
                state=state,
                phase=phase.value,
                exit_code=exit_code,
                reason=reason,
                end_time=now,
            )
        )
        self._events.append(
            EventRow(now, f"Job{state.value}", job_id=job_id, data={"reason": reason})
        )
        if self.notices is not None and self.notices.watches(job_id):
            self.notices.finished(job_id, phase, exit_code, reason, now)

    def node_registered(
        self, inventory: NodeInventory, now: float, state: NodeState = NodeState.UP
    ) -> None:
        self.store.upsert_node(
            NodeRow(
                name=inventory.name,
                address=inventory.address,
                registered_at=now,
                capacity=dict(inventory.resources),
                labels=dict(inventory.labels),
                devices=tuple(d.model_dump(mode="json") for d in inventory.devices),
                state=state,
                last_heartbeat=now,
            )
        )
        self.store.add_events([EventRow(now, "NodeRegistered", node=inventory.name)])

    def node_state(self, name: str, state: NodeState, now: float, reason: str) -> None:
        self.store.set_node_state(name, state)
        self._events.append(
            EventRow(now, "NodeStateChanged", node=name, data={"state": state, "why": reason})
        )

    def node_event(
        self, name: str, kind: str, now: float, data: Mapping[str, Any] | None = None
    ) -> None:
        """Something an operator did to a node (a drain), written with the next flush."""
        self._events.append(EventRow(now, kind, node=name, data=dict(data or {})))

    def flush(self) -> None:
        """Write what the last cycle or heartbeat changed, in one transaction.

        When the database cannot be reached (or is locked) the changes are kept and written by
        the next flush. When the store refuses the batch itself (a change names a row it does
        not hold, a task row already exists), the changes are written one by one and those the
        store refuses are logged and dropped: one bad change must not hold back every later
        write. A value the database cannot hold (``OverflowError``: an integer beyond 64 bits)
        is such a refusal too."""
        if not (self._new_tasks or self._job_changes or self._task_changes or self._events):
            return
        try:
            self.store.write_changes(
                new_tasks=self._new_tasks,
                job_changes=self._job_changes,
                task_changes=self._task_changes,
                new_events=self._events,
            )
        except OperationalError as exc:
            log.warning("store unavailable, %d changes kept for the next write: %s", self._n, exc)
            return
        except _REFUSED as exc:
            log.error(
                "store refused a batch of %d changes (%s); writing them one by one", self._n, exc
            )
            self._write_one_by_one()
            return
        self._new_tasks, self._job_changes, self._task_changes, self._events = [], [], [], []

    @property
    def _n(self) -> int:
        return (
            len(self._new_tasks)
            + len(self._job_changes)
            + len(self._task_changes)
            + len(self._events)
        )

    def _write_one_by_one(self) -> None:
        """Each pending change in its own transaction, in the batch's order (new tasks before
        the changes that name them); refused ones are dropped, and the rest are kept for the
        next flush when the database goes away meanwhile."""
        write = self.store.write_changes
        steps: list[tuple[str, object, Callable[[], None]]] = [
            *(("_new_tasks", r, partial(write, new_tasks=[r])) for r in self._new_tasks),
            *(("_job_changes", c, partial(write, job_changes=[c])) for c in self._job_changes),
            *(("_task_changes", c, partial(write, task_changes=[c])) for c in self._task_changes),
            *(("_events", e, partial(write, new_events=[e])) for e in self._events),
        ]
        self._new_tasks, self._job_changes, self._task_changes, self._events = [], [], [], []
        for pos, (_, _, step) in enumerate(steps):
            try:
                step()
            except OperationalError:
                for buffer, later, _ in steps[pos:]:
                    getattr(self, buffer).append(later)
                return
            except _REFUSED as exc:
                log.error("dropped a change the store refuses: %s", exc)

    # ------------------------------------------------------------------ reads

    def unfinished_jobs(self) -> tuple[list[JobDetail], list[JobDetail]]:
        """What a previous controller left: jobs it accepted but did not start (oldest
        first), and jobs it had running, with their tasks (a restarted controller adopts
        them when their agents report in)."""
        pending: list[JobDetail] = []
        running: list[JobDetail] = []
        for detail in self.store.unfinished_jobs():
            (pending if detail.job.state is JobState.PENDING else running).append(detail)
            if self.notices is not None:
                self.notices.recovered(detail)
        pending.sort(key=lambda d: d.job.seq)
        return pending, running

    def job_exists(self, job_id: str) -> bool:
        return self.store.get_job(job_id) is not None

    def get_job(self, job_id: str) -> JobView | None:
        detail = self.store.get_job(job_id)
        if detail is None:
            return None
        return job_view(detail.job, detail.tasks)

    def restarts(self, job_id: str) -> int:
        """How many times the job was requeued or restarted in place (0: never, or unknown)."""
        return self.store.restarts([job_id]).get(job_id, 0)

    def list_jobs(
        self,
        filters: JobFilters = ALL_JOBS,
        *,
        limit: int = 50,
        before_seq: int | None = None,
        detail: bool = False,
        steps: bool = False,
        combine_arrays: bool = False,
    ) -> list[JobView]:
        """The jobs ``filters`` asks for, newest first (:meth:`Store.list_jobs`); ``detail``:
        each with its tasks and restarts, as ``GET /v1/jobs/{id}`` shows it; ``steps``: each
        with its restarts and its steps summarised (not its tasks); ``combine_arrays``: each
        array's members that wait for one reason as one row (:meth:`Store.list_job_rows`)."""
        if combine_arrays:
            found = self.store.list_job_rows(filters, limit=limit, before_seq=before_seq)
            return row_views(self.store, found, detail, steps)
        rows = self.store.list_jobs(filters, limit=limit, before_seq=before_seq)
        return listed_views(self.store, rows, detail, steps)


def _devices(task: LiveTask) -> tuple[str, ...]:
    grant = task.grant
    return tuple(f"gpu:{i}" for i in grant.gpu_indices) + tuple(grant.gpu_uuids)
