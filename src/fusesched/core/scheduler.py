"""The scheduling core: events in, decisions out.

No I/O, no wall clock, no global randomness: the shell passes the time with every call and a
seeded generator at construction. The live controller and the simulator are two shells around
this same class.

A scheduling cycle runs in named phases:

1. **order** – sort the waiting queue by the queue-order policy;
2. **filter** – per job, the nodes its selectors/affinity allow that have room (array masks);
3. **score** – order those nodes by the placement policy;
4. **reserve** – put the tentative allocation into a :class:`Statement`;
5. **permit** – commit only if the whole gang fits (else discard);
6. **bind** – mark the job running and emit :class:`StartJob`.

When the first job in order cannot start, the backfill policy decides what may overtake it
(see :mod:`fusesched.core.backfill`).

This module holds the state, the event dispatch, the cycle and *bind*. Phases 2–5 for one job
are in :mod:`fusesched.core.planning`, job intake (submit, dependencies, cancel, reject) in
:mod:`fusesched.core.intake`, exits and release in :mod:`fusesched.core.exits`: functions that
take the core, bound as :class:`SchedulerCore` methods in its class body; node events
(registration, state, cached datasets) in :mod:`fusesched.core.node_events`.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from types import MethodType

import numpy as np
import numpy.typing as npt

from fusesched.core import (
    array_deps,
    completing,
    deadlines,
    ended_requeue,
    exits,
    intake,
    job_update,
    multifactor,
    node_events,
    past_usage,
    planning,
    reservation_changes,
    reservations,
)
from fusesched.core.admission import start_admitted
from fusesched.core.adoption import adopt
from fusesched.core.backfill import BACKFILLERS
from fusesched.core.cluster import BoolArray, ClusterArrays, IntArray
from fusesched.core.datasets import DataIndex
from fusesched.core.devices import DeviceAssignment, DeviceLedger
from fusesched.core.intake import DuplicateJobId as DuplicateJobId
from fusesched.core.licenses import LicensePool, licensed_try_place
from fusesched.core.placement import Allocation, group_placements
from fusesched.core.prediction import Predictions
from fusesched.core.records import JobRecord, WaitingQueue
from fusesched.core.running import RunningSet
from fusesched.core.shapes import ShapeCompiler
from fusesched.core.tenants import TenantGate
from fusesched.model.events import (
    ArrayRecalled,
    CompletingEnded,
    Decision,
    EndedJobRequeueRequested,
    Event,
    GroupPlacement,
    JobAdopted,
    JobCancelRequested,
    JobCheckpointed,
    JobExited,
    JobHoldRequested,
    JobReleaseRequested,
    JobSubmitted,
    JobUpdateRequested,
    NodeAdded,
    NodeDatasets,
    NodeStateChanged,
    ReservationDeleted,
    ReservationSet,
    StartJob,
    UsageRecalled,
)
from fusesched.model.fast import builder
from fusesched.model.phases import JobPhase
from fusesched.model.resources import Resources
from fusesched.policies.placement import PLACEMENT_POLICIES
from fusesched.policies.priority import PriorityBreakdown
from fusesched.policies.queue_order import QUEUE_ORDERS
from fusesched.policies.registry import CoreConfig
from fusesched.policies.runtime_prediction import RUNTIME_PREDICTORS, make_predictor
from fusesched.policies.tenancy_policy import TenancyPolicy

# (a module global: cheaper to read than the enum's attribute)
RUNNING = JobPhase.RUNNING

# the launch decision's objects, made per started job: built without calling their classes
# (see fusesched.model.fast.builder)
_group_placement: Callable[
    [str, Resources, IntArray, IntArray, npt.NDArray[np.object_], DeviceAssignment | None],
    GroupPlacement,
] = builder(GroupPlacement)
_start_job: Callable[[str, tuple[GroupPlacement, ...], bool], StartJob] = builder(StartJob)


@dataclass(slots=True)
class CoreStats:
    cycles: int = 0
    started: int = 0
    backfilled: int = 0
    rejected: int = 0


class SchedulerCore:
    """Pure scheduling state machine. Call :meth:`step` with the time and new events."""

    def __init__(self, config: CoreConfig | None = None, rng: np.random.Generator | None = None):
        self.config = config or CoreConfig()
        self.rng = rng if rng is not None else np.random.default_rng(0)
        self.order = QUEUE_ORDERS[self.config.queue_order]
        backfill = self.config.backfill
        self._backfill = BACKFILLERS[backfill] if backfill != "none" else None
        self.placement = PLACEMENT_POLICIES[self.config.placement]
        self.cluster = ClusterArrays()
        self.devices = DeviceLedger()  # per-device accounting of the nodes' accelerators
        self.jobs: dict[str, JobRecord] = {}
        self.queue = WaitingQueue(self.order, 0)
        self.running = RunningSet(0)
        self.completing: completing.Holds = {}  # ended runs' processes still on their nodes
        self.stats = CoreStats()
        self._dependents: dict[str, list[str]] = {}
        self.arrays = array_deps.ArrayDeps()  # for dependencies on whole arrays (aftercorr too)
        # per (name, user), the jobs registered since the last singleton of it (intake.namesakes)
        self._named: dict[tuple[str, str], list[str]] = {}
        self._started: list[JobRecord] = []  # started this cycle, with jobs waiting on them
        self._array_running: dict[str, int] = {}
        self._array_held: dict[str, list[JobRecord]] = {}
        self._seq = 0
        self.shapes = ShapeCompiler(
            self.cluster, self.placement, self.config.reject_unschedulable, self.devices
        )
        # per shape number, its eligible nodes (see ClusterArrays.filter)
        self._filters: dict[int, tuple[BoolArray | None, IntArray | None]] = {}
        # change tracking: a cycle with nothing freed and nothing new can start nothing
        self._changed = False
        self._fresh: list[JobRecord] = []
        self.blocked_head: JobRecord | None = None
        # waiting jobs' reasons may have changed: a shell that shows them asks again
        # (core/pending_reasons.py; the simulator never does)
        self.reasons_due = False
        self.reservation: object | None = None  # the backfill policy's cached reservation
        self.last_reservation: tuple[str, float, tuple[int, ...]] | None = None
        # tenancy: quotas, fair share, preemption (None: one flat pool, no quotas)
        tenancy = self.config.tenancy
        if tenancy is None and self.order.multifactor:
            tenancy = TenancyPolicy()  # the multifactor order without quotas
        self.tenants = TenantGate(tenancy) if tenancy is not None else None
        self._parked: dict[str, JobRecord] = {}  # queued, blocked by their queue's quota
        self._delayed: dict[str, JobRecord] = {}  # requeued with a backoff (not_before)
        # advance reservations (None while there are none: see core/reservations.py)
        self.bookings: reservations.Bookings | None = None
        self._capacity: IntArray | None = None  # column totals of the cluster (cached)
        # data-aware placement: which nodes cache which datasets, and the jobs that wait for
        # a node holding their data until a deadline (heap of (deadline, job id))
        self.data = DataIndex()
        self._data_deadlines: list[tuple[float, str]] = []
        # waiting jobs with a deadline (sbatch --deadline): heap of (latest start, job id)
        self._deadlines: list[tuple[float, str]] = []
        self._now = 0.0
        # cluster licenses (None: the cluster declares none, and nothing checks them): a job
        # asking for some is placed only when they are free (docs/LICENSES.md)
        self.licenses = LicensePool.of(self.config.licenses)
        if self.licenses is not None:
            self.try_place = MethodType(licensed_try_place, self)  # type: ignore[method-assign]
        # predicted run times instead of requests (None: the requests are the estimates)
        predictor = make_predictor(self.config.runtime_prediction)
        self.predictions = (
            Predictions(
                predictor,
                RUNTIME_PREDICTORS[self.config.runtime_prediction].correction,
                self.config.default_estimate_s,
            )
            if predictor is not None
            else None
        )

    # ================================================================== entry points

    def step(self, now: float, events: Iterable[Event] = ()) -> list[Decision]:
        """Apply every event, then run one scheduling cycle."""
        out: list[Decision] = []
        handle, submit, exited = self.handle, self._submit, self._exited
        for event in events:
            # the two events of every job go straight to their handler (as handle would)
            if type(event) is JobSubmitted:
                forced = submit(event.job, now)
            elif type(event) is JobExited:
                forced = exited(event, now)
            else:
                forced = handle(event, now)
            if forced:
                out.extend(forced)
        started = self.cycle(now)
        if not out:
            return started
        out.extend(started)
        return out

    def handle(self, event: Event, now: float) -> list[Decision]:
        """Apply one event to the state; returns decisions it forces (rejections, stops)."""
        if type(event) is not JobCheckpointed:  # (a checkpoint changes no waiting job)
            self.reasons_due = True
        if isinstance(event, JobSubmitted):
            return self._submit(event.job, now)
        if isinstance(event, JobExited):
            return self._exited(event, now)
        if isinstance(event, JobCancelRequested):
            return self._cancel(event.job_id, event.reason, now)
        if isinstance(event, JobHoldRequested):
            return intake.hold(self, event.job_id, event.reason, now)
        if isinstance(event, JobReleaseRequested):
            return intake.release(self, event.job_id, now)
        if isinstance(event, JobUpdateRequested):
            out = job_update.update(self, event, now)
            if self.bookings is not None:  # (a new time limit may change its nodes)
                reservations.refresh_job(self, event.job_id, now)
            return out
        if isinstance(event, EndedJobRequeueRequested):
            return ended_requeue.requeue_ended(self, event, now)
        if isinstance(event, JobAdopted):
            return adopt(self, event, now)
        if isinstance(event, CompletingEnded):
            return completing.ended(self, event)
        if isinstance(event, ArrayRecalled):
            return array_deps.recall(self, event, now)
        if isinstance(event, UsageRecalled):
            if self.tenants is not None:
                past_usage.recall(self.tenants, event, now)
            return []
        if isinstance(event, JobCheckpointed):
            rec = self.jobs.get(event.job_id)
            if rec is None:
                raise KeyError(f"unknown job {event.job_id!r}")
            if rec.last_checkpoint is None or event.time > rec.last_checkpoint:
                rec.last_checkpoint = event.time
            return []
        if isinstance(event, NodeAdded):
            node_events.added(self, event)
            return []
        if isinstance(event, NodeDatasets):
            node_events.datasets(self, event)
            return []
        if isinstance(event, NodeStateChanged):
            node_events.state_changed(self, event)
            return []
        if isinstance(event, (ReservationSet, ReservationDeleted)):
            return reservation_changes.handle(self, event, now)
        raise TypeError(f"not an event: {event!r}")  # pragma: no cover

    def cycle(self, now: float) -> list[Decision]:
        """One scheduling cycle: start what can start, then let the backfill policy act.

        If nothing was freed since the last cycle (no exit, no node change) and the order is
        static, only the jobs queued since then can start: the others already failed with at
        least as many free resources, so they are not tried again.

        Jobs waiting for the start of a job it started (``after`` dependencies) join the
        queue once it has run, and the cycle goes on with them: they may start at once.

        Waiting jobs that can no longer end by their deadline are removed: before the cycle
        those too late to start, after it those it could not start at their latest start.
        """
        self.stats.cycles += 1
        parked = len(self._parked)
        expired = None
        if self._deadlines and self._deadlines[0][0] < now:  # (none in most workloads)
            expired = deadlines.expire(self, now, this_cycle=False)  # too late to start
        bookings = self.bookings
        if bookings is not None and bookings.due <= now:  # a reservation's time came
            out = reservation_changes.tick(self, now)
            out.extend(self._cycle(now))
        else:
            out = self._cycle(now)
        while self._started:
            started, self._started = self._started, []
            for rec in started:
                intake.settle_started(self, rec, now)
            if self._fresh:
                out.extend(self._cycle(now))
        if self._deadlines and self._deadlines[0][0] <= now:  # (could not start in time)
            out.extend(deadlines.expire(self, now, this_cycle=True))
        if expired:
            out[:0] = expired
        if out or len(self._parked) != parked:  # (jobs started, left or were parked)
            self.reasons_due = True
        return out

    def _cycle(self, now: float) -> list[Decision]:
        """The body of :meth:`cycle` (once, or again for jobs let go by starts)."""
        self._now = now
        if self._delayed:
            self._wake_delayed(now)
        if self._data_deadlines and self._data_deadlines[0][0] <= now:
            while self._data_deadlines and self._data_deadlines[0][0] <= now:
                heapq.heappop(self._data_deadlines)
            self._changed = True  # jobs that waited for their data may now go anywhere
        if self.predictions is not None and self.predictions.correct(self.jobs, self.running, now):
            self._changed = True  # later estimated ends: the head's reservation moves
        if self.tenants is not None:
            lifted = self.tenants.start_cycle(self, now)
            # jobs parked by their quota come back when quota was freed where they draw
            freed = self.tenants.freed(self._parked.values(), everything=lifted)
            if freed:
                self._unpark(now, freed)
        queue = self.queue
        changed = self._changed or self.order.dynamic
        fresh = self._fresh
        if self._changed or fresh:  # (a dynamic order alone: only a new head, starts, parks)
            self.reasons_due = True
        self._changed = False
        self._fresh = []
        if not queue.records or not (changed or fresh):
            return []
        out: list[Decision] = []
        if self.order.dynamic:  # (a static order keeps the queue sorted as it goes)
            self._reorder(now)  # phase 1: order
        if self.tenants is not None:
            out.extend(start_admitted(self, now, changed, fresh))
        else:
            for rec in queue.records:
                if rec is self.blocked_head and not changed:
                    break  # failed before with more room
                alloc = self.try_place(rec)  # phases 2-5: filter, score, reserve, permit
                if alloc is None:
                    break
                out.append(self.bind(rec, alloc, now, backfilled=False))  # phase 6: bind
            if out:
                queue.remove_prefix(len(out))
        if not queue.records:
            self.blocked_head = None
            return out
        head = queue.records[0]
        if head is not self.blocked_head:
            changed = True
            self.blocked_head = head
            self.reasons_due = True  # (a new first in line)
        if changed or out:  # something freed, a new head, or jobs started ahead of the head
            self.reservation = None
        if self._backfill is not None:
            out.extend(self._backfill(self, now, None if changed else fresh))
        return out

    def _unpark(self, now: float, records: list[JobRecord]) -> None:
        for rec in records:
            del self._parked[rec.id]
            if not self.order.dynamic:
                rec.key = self.order.key(rec.facts, now)
            self.queue.push(rec, now)
            self._fresh.append(rec)

    def _wake_delayed(self, now: float) -> None:
        due = [rec for rec in self._delayed.values() if rec.not_before <= now]
        for rec in due:
            del self._delayed[rec.id]
            self._enqueue(rec, now, "backoff over")

    def due_within(self, horizon_s: float) -> list[JobRecord]:
        """The jobs waiting for a begin time or a requeue's backoff that ends within
        ``horizon_s`` of the core's clock, in the order they were delayed: what power saving
        wakes nodes ahead for (they queue then), read only."""
        until = self._now + horizon_s
        return [rec for rec in self._delayed.values() if rec.not_before <= until]

    def next_wakeup(self) -> float | None:
        """The earliest time a requeued job's backoff ends or a job's begin time comes, a job
        may borrow quota again, a running job outlives its predicted run time, a waiting
        job's deadline can no longer be met or an advance reservation's time comes (a shell
        should run a cycle then even if nothing else happens), or None."""
        due = self.predictions.next_due(self.jobs) if self.predictions is not None else None
        if self._data_deadlines:
            deadline = self._data_deadlines[0][0]
            due = deadline if due is None else min(due, deadline)
        latest = deadlines.next_due(self)  # a waiting job's latest start passes
        if latest is not None:
            due = latest if due is None else min(due, latest)
        borrow = self.tenants.next_wakeup() if self.tenants is not None else None
        if borrow is not None:
            due = borrow if due is None else min(due, borrow)
        if self.bookings is not None and self.bookings.due < math.inf:
            booked = self.bookings.due  # a reservation ends, or a job loses its nodes
            due = booked if due is None else min(due, booked)
        if not self._delayed:
            return due
        backoff = min(r.not_before for r in self._delayed.values())
        return backoff if due is None else min(backoff, due)

    def _reorder(self, now: float) -> None:
        queue = self.queue
        if self.order.multifactor and self.tenants is not None and len(queue) > 1:
            queue.reorder(
                now, multifactor.sort_keys(self.tenants, queue.records, now, self.capacity())
            )
        else:
            queue.reorder(now)

    def capacity(self) -> IntArray:
        """Column totals of the cluster's capacity (cached until the cluster changes)."""
        if self._capacity is None:
            self._capacity = self.cluster.capacity.sum(axis=0)
        return self._capacity

    def priority(self, job_id: str, now: float) -> PriorityBreakdown:
        """The multifactor priority of a job, factor by factor (needs a tenancy config or
        the ``multifactor`` order)."""
        rec = self.jobs.get(job_id)
        if rec is None:
            raise KeyError(f"unknown job {job_id!r}")
        if self.tenants is None:
            raise ValueError("no multifactor priority: the core runs without tenancy")
        capacity = {name: int(self.capacity()[k]) for name, k in self.cluster.columns.items()}
        return multifactor.breakdown(self.tenants, rec, now, capacity, self.queue.records)

    # ================================================================== jobs and placement
    # Functions of fusesched.core.intake (submit, queue, cancel, reject),
    # fusesched.core.exits (exit, release) and fusesched.core.planning (filter, score, reserve,
    # permit), bound here as methods: a call costs what a method call costs.

    register_job = intake.register_job
    reshape = intake.reshape
    _submit = intake.submit
    _enqueue = intake.enqueue
    _cancel = intake.cancel
    _reject = intake.reject
    _settle_dependents = intake.settle_dependents
    _exited = exits.exited
    fluid_column = planning.fluid_column
    plan = planning.plan
    try_place = planning.try_place

    # ================================================================== bind

    def bind(self, rec: JobRecord, alloc: Allocation, now: float, backfilled: bool) -> StartJob:
        """Mark the job running on ``alloc`` and return the launch decision."""
        rec.allocation = alloc
        rec.start_time = now
        est_end = rec.est_end = now + rec.estimate
        rec.move(RUNNING, now, "backfilled" if backfilled else "resources available")
        job_id = rec.spec.id
        if (self._dependents and job_id in self._dependents) or (
            self.arrays.tallies and rec.spec.array_parent in self.arrays.tallies
        ):
            self._started.append(rec)  # its (or its array's) ``after`` dependents go on later
        self.running.add(job_id, est_end, alloc.total, alloc)
        if self.predictions is not None:
            self.predictions.started(rec)
        if self.tenants is not None:
            self.tenants.bind(rec, now)
        if self.licenses is not None:
            self.licenses.take(job_id, rec.spec.licenses)
        stats = self.stats
        stats.started += 1
        if backfilled:
            stats.backfilled += 1
        placed = alloc.groups
        if len(placed) == 1:  # (the common case of group_placements, inline)
            group, nodes, counts = placed[0]
            device = alloc.devices[0] if alloc.devices else None
            names = self.cluster.name_array
            one = _group_placement(group.name, group.resources, nodes, counts, names, device)
            return _start_job(job_id, (one,), backfilled)
        declared = [g.name for g in rec.spec.task_groups]
        return _start_job(
            job_id, group_placements(alloc, declared, self.cluster.name_array), backfilled
        )

    def bind_adopted(self, rec: JobRecord, alloc: Allocation, start_time: float) -> None:
        """Mark an adopted job running on ``alloc`` since ``start_time`` (no launch)."""
        rec.allocation = alloc
        rec.start_time = start_time
        rec.est_end = start_time + rec.estimate
        rec.move(JobPhase.RUNNING, start_time, "adopted after a controller restart")
        self.running.add(rec.spec.id, rec.est_end, alloc.total, alloc)
        if self.predictions is not None:
            self.predictions.started(rec)
        if self.tenants is not None:
            rec.admission = self.tenants.admission(rec)
            self.tenants.bind(rec, start_time)
        if self.licenses is not None:  # (counted again: they were held before the restart)
            self.licenses.take(rec.spec.id, rec.spec.licenses)
