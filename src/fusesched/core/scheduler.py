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
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable
from dataclasses import dataclass, replace

import numpy as np

from fusesched.core.admission import pin_flavours, start_admitted
from fusesched.core.adoption import adopt
from fusesched.core.backfill import BACKFILLERS
from fusesched.core.cluster import BoolArray, ClusterArrays, IntArray, covers
from fusesched.core.datasets import DataIndex, FloatArray, node_bonus
from fusesched.core.device_specs import (
    Device,
    devices_from_capacity,
    fill_models,
    is_device_kind,
    with_device_capacity,
)
from fusesched.core.devices import DeviceLedger, DevicesUnavailable
from fusesched.core.placement import (
    Allocation,
    Plan,
    SearchBudgetExceeded,
    Statement,
    device_slots,
    first_fit_column,
    group_placements,
    plan_groups,
    search_placement,
    task_slots,
)
from fusesched.core.prediction import Predictions
from fusesched.core.records import JobRecord, WaitingQueue
from fusesched.core.requeue import requeue
from fusesched.core.running import RunningSet
from fusesched.core.shapes import ShapeCompiler
from fusesched.core.tenants import TenantGate
from fusesched.core.topology import TopologyStatus, choose_domains
from fusesched.model.events import (
    Decision,
    Event,
    GroupPlacement,
    JobAdopted,
    JobCancelRequested,
    JobCheckpointed,
    JobExited,
    JobSubmitted,
    NodeAdded,
    NodeDatasets,
    NodeStateChanged,
    RejectJob,
    StartJob,
    StopJob,
)
from fusesched.model.job import DependencyKind, JobSpec, QoS
from fusesched.model.phases import JobPhase
from fusesched.policies.placement import PLACEMENT_POLICIES
from fusesched.policies.priority import PriorityBreakdown
from fusesched.policies.queue_order import QUEUE_ORDERS, JobFacts
from fusesched.policies.registry import CoreConfig
from fusesched.policies.runtime_prediction import RUNTIME_PREDICTORS, make_predictor
from fusesched.policies.tenancy_policy import TenancyPolicy


class DuplicateJobId(ValueError):
    """A submitted job (or array child) reuses the id of a job the core already knows."""


#: Steps of exhaustive search tried when greedy placement of a multi-group gang fails.
SEARCH_BUDGET = 2_000

#: Domains tried for a job with a topology request before it waits.
TOPOLOGY_TRIES = 3

#: ``QoS.rank`` looked up once per tier rather than computed per job.
QOS_RANK = {qos: qos.rank for qos in QoS}

# (module globals: cheaper to read than the enum's attributes)
RUNNING, QUEUED, COMPLETED = JobPhase.RUNNING, JobPhase.QUEUED, JobPhase.COMPLETED


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
        self.placement = PLACEMENT_POLICIES[self.config.placement]
        self.cluster = ClusterArrays()
        self.devices = DeviceLedger()  # per-device accounting of the nodes' accelerators
        self.jobs: dict[str, JobRecord] = {}
        self.queue = WaitingQueue(self.order, 0)
        self.running = RunningSet(0)
        self.stats = CoreStats()
        self._dependents: dict[str, list[str]] = {}
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
        self.reservation: object | None = None  # the backfill policy's cached reservation
        self.last_reservation: tuple[str, float, tuple[int, ...]] | None = None
        # tenancy: quotas, fair share, preemption (None: one flat pool, no quotas)
        tenancy = self.config.tenancy
        if tenancy is None and self.order.multifactor:
            tenancy = TenancyPolicy()  # the multifactor order without quotas
        self.tenants = TenantGate(tenancy) if tenancy is not None else None
        self._parked: dict[str, JobRecord] = {}  # queued, blocked by their queue's quota
        self._delayed: dict[str, JobRecord] = {}  # requeued with a backoff (not_before)
        self._capacity: IntArray | None = None  # column totals of the cluster (cached)
        # data-aware placement: which nodes cache which datasets, and the jobs that wait for
        # a node holding their data until a deadline (heap of (deadline, job id))
        self.data = DataIndex()
        self._data_deadlines: list[tuple[float, str]] = []
        self._now = 0.0
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
        handle = self.handle
        for event in events:
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
        if isinstance(event, JobSubmitted):
            return self._submit(event.job, now)
        if isinstance(event, JobExited):
            return self._exited(event, now)
        if isinstance(event, JobCancelRequested):
            return self._cancel(event.job_id, event.reason, now)
        if isinstance(event, JobAdopted):
            return adopt(self, event, now)
        if isinstance(event, JobCheckpointed):
            rec = self.jobs.get(event.job_id)
            if rec is None:
                raise KeyError(f"unknown job {event.job_id!r}")
            if rec.last_checkpoint is None or event.time > rec.last_checkpoint:
                rec.last_checkpoint = event.time
            return []
        if isinstance(event, NodeAdded):
            self._add_node(event)
            self._widen()
            self._cluster_changed()
            return []
        if isinstance(event, NodeDatasets):
            row = self.cluster.index.get(event.node)
            if row is None:
                raise KeyError(f"unknown node {event.node!r}")
            if self.data.report(row, event.datasets):
                self._changed = True  # a job may now be placed with its data
            return []
        if isinstance(event, NodeStateChanged):
            if event.node not in self.cluster.index:
                raise KeyError(f"unknown node {event.node!r}")
            self.cluster.set_state(event.node, event.state)
            self._cluster_changed()
            return []
        raise TypeError(f"not an event: {event!r}")  # pragma: no cover

    def cycle(self, now: float) -> list[Decision]:
        """One scheduling cycle: start what can start, then let the backfill policy act.

        If nothing was freed since the last cycle (no exit, no node change) and the order is
        static, only the jobs queued since then can start: the others already failed with at
        least as many free resources, so they are not tried again.
        """
        self.stats.cycles += 1
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
        if changed or out:  # something freed, a new head, or jobs started ahead of the head
            self.reservation = None
        if self.config.backfill != "none":
            only = None if changed else fresh
            out.extend(BACKFILLERS[self.config.backfill](self, now, only))
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

    def next_wakeup(self) -> float | None:
        """The earliest time a requeued job's backoff ends, a job may borrow quota again or a
        running job outlives its predicted run time (a shell should run a cycle then even if
        nothing else happens), or None."""
        due = self.predictions.next_due(self.jobs) if self.predictions is not None else None
        if self._data_deadlines:
            deadline = self._data_deadlines[0][0]
            due = deadline if due is None else min(due, deadline)
        borrow = self.tenants.next_wakeup() if self.tenants is not None else None
        if borrow is not None:
            due = borrow if due is None else min(due, borrow)
        if not self._delayed:
            return due
        backoff = min(r.not_before for r in self._delayed.values())
        return backoff if due is None else min(backoff, due)

    def _reorder(self, now: float) -> None:
        queue = self.queue
        if self.order.multifactor and self.tenants is not None and len(queue) > 1:
            queue.reorder(now, self.tenants.sort_keys(queue.records, now, self.capacity()))
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
        return self.tenants.breakdown(rec, now, capacity, self.queue.records)

    def _add_node(self, event: NodeAdded) -> None:
        """Register a node; its accelerators go into the device ledger one by one and count
        in the aggregate columns as :func:`with_device_capacity` says."""
        spec = event.node
        devices: list[Device] = []
        if spec.devices:
            devices = fill_models(spec.devices, spec.labels)
        elif any(is_device_kind(name) for name in spec.capacity):
            devices = devices_from_capacity(spec.capacity, spec.labels)
        if devices:
            capacity = with_device_capacity(spec.capacity, devices)
            spec = replace(spec, capacity=capacity, devices=tuple(devices))
        self.cluster.add_node(spec, event.state)
        if devices:
            self.devices.add_node(self.cluster.index[spec.name], devices)

    def _cluster_changed(self) -> None:
        self._changed = True
        self._capacity = None
        self.shapes.clear()
        self._filters.clear()

    # ================================================================== events

    def _submit(self, spec: JobSpec, now: float) -> list[Decision]:
        if spec.array is not None and spec.array_index is None:
            return self._submit_array(spec, now)
        rec = self.register_job(spec, now)
        if rec.never_fits:
            return self._reject(rec, rec.never_fits, now)
        refused = self.tenants.refuse(spec) if self.tenants is not None else ""
        if refused:
            return self._reject(rec, refused, now)
        for dep in spec.dependencies:
            other = self.jobs.get(dep.job_id)
            if other is None:
                return self._reject(rec, f"dependency on unknown job {dep.job_id!r}", now)
            if other.phase.terminal:
                if dep.kind is DependencyKind.AFTER_OK and other.phase is not JobPhase.COMPLETED:
                    return self._reject(rec, f"dependency {dep.job_id} did not succeed", now)
                continue
            rec.waiting_on.add(dep.job_id)
            self._dependents.setdefault(dep.job_id, []).append(spec.id)
        if not rec.waiting_on:
            self._enqueue(rec, now, "submitted")
        return []

    def register_job(self, spec: JobSpec, now: float) -> JobRecord:
        """A new job's record (pending), compiled; its id must be new."""
        if spec.id in self.jobs:  # the shell must not reuse ids
            raise DuplicateJobId(f"job id {spec.id!r} is already in use")
        rec = self._compile(spec, now)
        self.jobs[spec.id] = rec
        return rec

    def _submit_array(self, spec: JobSpec, now: float) -> list[Decision]:
        children = spec.expand_array()
        taken = [child.id for child in children if child.id in self.jobs]
        if taken:  # refuse before touching any state
            raise DuplicateJobId(f"job id {taken[0]!r} is already in use")
        out: list[Decision] = []
        for child in children:
            out.extend(self._submit(child, now))
        return out

    def _compile(self, spec: JobSpec, now: float) -> JobRecord:
        """The job's record, with its task groups in array form (compiled once per shape)."""
        self._seq += 1
        shape = self.shapes.shape_of(spec)
        if self.predictions is not None:
            estimate = self.predictions.estimate(spec)
        elif spec.walltime_s is not None:
            estimate = spec.walltime_s
        else:
            estimate = self.config.default_estimate_s
        facts = JobFacts(spec.submit_time, estimate, shape.cpus, spec.priority, QOS_RANK[spec.qos])
        rec = JobRecord(
            spec=spec,
            seq=self._seq,
            phase=JobPhase.PENDING,
            groups=shape.groups,
            total=shape.total,
            bound=shape.bound,
            estimate=estimate,
            facts=facts,
            never_fits=shape.never_fits,
            shape_id=shape.number,
            family=shape.family,
            # an exclusive job's room is whole idle nodes, a data-aware one's depends on
            # where its data is: the column sum does not decide
            single_column=-1 if spec.placement.exclusive or spec.datasets else shape.single_column,
            single_amount=shape.single_amount,
            single_total=shape.single_total,
        )
        if self.predictions is not None:
            self.predictions.watch(rec)  # re-predicted while it waits
        return rec

    def _enqueue(self, rec: JobRecord, now: float, reason: str) -> None:
        if rec.phase is not QUEUED:
            rec.move(QUEUED, now, reason)
        spec = rec.spec
        parent = spec.array_parent
        if parent and spec.array and spec.array.max_parallel is not None:
            if self._array_running.get(parent, 0) >= spec.array.max_parallel:
                self._array_held.setdefault(parent, []).append(rec)
                return
            self._array_running[parent] = self._array_running.get(parent, 0) + 1
        if not self.order.dynamic:
            rec.key = self.order.key(rec.facts, now)
        wait = self.config.data_locality_wait_s
        if spec.datasets and wait > 0:
            rec.data_wait_until = now + wait
            heapq.heappush(self._data_deadlines, (rec.data_wait_until, rec.id))
        self.queue.push(rec, now)
        self._fresh.append(rec)

    def _exited(self, event: JobExited, now: float) -> list[Decision]:
        rec = self.jobs.get(event.job_id)
        if rec is None or rec.phase is not RUNNING:
            raise KeyError(f"job {event.job_id!r} is not running")
        self._release(rec, now)
        rec.exit_code = event.exit_code
        if rec.stop_requested:
            rec.move(JobPhase.CANCELLED, now, rec.stop_requested)
        elif event.timed_out:
            rec.move(JobPhase.TIMEOUT, now, event.reason or "walltime exceeded")
        elif event.exit_code == 0:
            rec.move(COMPLETED, now, event.reason or "exit 0")
        elif rec.preempt_reason is not None or event.requeue:
            return requeue(self, rec, event, now)
        else:
            rec.move(JobPhase.FAILED, now, event.reason or f"exit {event.exit_code}")
        if self.predictions is not None and self.predictions.ended(rec):
            self._repredict(rec.spec.user, now)
        return self._settle_dependents(rec, now)

    def _repredict(self, user: str, now: float) -> None:
        """``user``'s history grew: predict their waiting jobs again; a changed estimate
        moves the job's queue row (and, in a static order, its place), and the head's
        reservation is recomputed."""
        assert self.predictions is not None
        changed = self.predictions.repredict(user)
        if changed:
            for rec in changed:
                if rec.phase is QUEUED:  # (parked, delayed or held jobs are keyed when queued)
                    self.queue.reestimate(rec, now)
            self._changed = True
            self.reservation = None

    def reshape(self, rec: JobRecord, spec: JobSpec) -> None:
        shape = self.shapes.shape_of(spec)
        rec.spec = spec
        rec.groups, rec.total, rec.bound = shape.groups, shape.total, shape.bound
        rec.never_fits, rec.shape_id, rec.family = shape.never_fits, shape.number, shape.family
        single = -1 if spec.placement.exclusive or spec.datasets else shape.single_column
        rec.single_column, rec.single_amount = single, shape.single_amount
        rec.single_total = shape.single_total

    def _release(self, rec: JobRecord, now: float) -> None:
        assert rec.allocation is not None and rec.est_end is not None
        alloc = rec.allocation
        if alloc.column_amounts is not None and alloc.rows is None:
            self.cluster.give_column(alloc.nodes, alloc.column, alloc.column_amounts, alloc.total)
        else:
            self.cluster.give(alloc.nodes, alloc.amounts, unique=alloc.unique, total=alloc.total)
        if alloc.devices:
            for devices in alloc.devices:
                if devices is not None:
                    self.devices.release(devices)
        spec = rec.spec
        self.running.remove(spec.id)
        if self.tenants is not None:
            self.tenants.release(rec, now)
        self._changed = True
        rec.end_time = now
        if spec.array_parent is not None:
            self._array_slot_freed(spec.array_parent, now)

    def _array_slot_freed(self, parent: str | None, now: float) -> None:
        """A child of a throttled array left the queue or ended: admit the next held one."""
        if parent is None or parent not in self._array_running:
            return
        self._array_running[parent] -= 1
        held = self._array_held.get(parent)
        if held:
            nxt = held.pop(0)
            self._array_running[parent] += 1
            if not self.order.dynamic:
                nxt.key = self.order.key(nxt.facts, now)
            self.queue.push(nxt, now)
            self._fresh.append(nxt)

    def _settle_dependents(self, rec: JobRecord, now: float) -> list[Decision]:
        out: list[Decision] = []
        waiting = self._dependents.pop(rec.spec.id, None)
        if waiting is None:
            return out
        for dep_id in waiting:
            dep = self.jobs[dep_id]
            if dep.phase is not JobPhase.PENDING:
                continue
            kinds = {d.kind for d in dep.spec.dependencies if d.job_id == rec.id}
            if DependencyKind.AFTER_OK in kinds and rec.phase is not JobPhase.COMPLETED:
                out.extend(self._reject(dep, f"dependency {rec.id} ended {rec.phase}", now))
                continue
            dep.waiting_on.discard(rec.id)
            if not dep.waiting_on:
                self._enqueue(dep, now, f"dependencies met ({rec.id} {rec.phase})")
        return out

    def _cancel(self, job_id: str, reason: str, now: float) -> list[Decision]:
        rec = self.jobs.get(job_id)
        if rec is None:
            raise KeyError(f"unknown job {job_id!r}")
        if rec.phase is JobPhase.RUNNING:
            rec.stop_requested = reason
            return [StopJob(job_id, reason)]
        if rec.phase is JobPhase.QUEUED:
            self._dequeue(rec, now)
            self._changed = True
        if rec.phase.terminal:
            return []
        rec.move(JobPhase.CANCELLED, now, reason)
        if self.predictions is not None:
            self.predictions.ended(rec)  # (never ran: forgotten, nothing learned)
        return self._settle_dependents(rec, now)

    def _dequeue(self, rec: JobRecord, now: float) -> None:
        if self.tenants is not None:
            self.tenants.dequeued(rec.id)
        if self._delayed.pop(rec.id, None) is not None:
            return
        if self._parked.pop(rec.id, None) is not None:
            self._array_slot_freed(rec.spec.array_parent, now)
            return
        parent = rec.spec.array_parent
        held = self._array_held.get(parent or "")
        if held and rec in held:
            held.remove(rec)
            return
        self.queue.remove(rec)
        self._array_slot_freed(parent, now)

    def _reject(self, rec: JobRecord, reason: str, now: float) -> list[Decision]:
        self.stats.rejected += 1
        rec.move(JobPhase.CANCELLED, now, f"rejected: {reason}")
        if self.predictions is not None:
            self.predictions.ended(rec)
        return [RejectJob(rec.id, reason), *self._settle_dependents(rec, now)]

    def _widen(self) -> None:
        """A node brought a new resource column: pad every array that has one row per column."""
        width = len(self.cluster.columns)
        self.queue.widen(width)
        self.running.widen(width)

        def pad(array: IntArray) -> IntArray:
            extra = width - array.shape[-1]
            if extra <= 0:
                return array
            return np.pad(array, [(0, 0)] * (array.ndim - 1) + [(0, extra)])

        seen: set[int] = set()
        for rec in self.jobs.values():
            rec.total = pad(rec.total)
            rec.bound = pad(rec.bound)
            for g in rec.groups or ():
                if id(g) not in seen:  # groups are shared between jobs of one shape
                    seen.add(id(g))
                    g.per_task = pad(g.per_task)
            alloc = rec.allocation
            if alloc is not None and not rec.phase.terminal:
                if alloc.rows is not None:
                    alloc.rows = pad(alloc.rows)
                alloc.total = pad(alloc.total)

    # ================================================================== placement

    def fluid_column(self, rec: JobRecord) -> int:
        """The single column whose free sum decides exactly if ``rec`` fits, or -1.

        That holds for one task group of one resource, without label constraints, whose task
        size divides the column's quantum (so every node's free amount is a multiple of it).
        """
        col = rec.single_column
        if col < 0 or not self.cluster.all_up:  # sums would count nodes that are not up
            return -1
        quantum = self.cluster.quantum[col]
        return col if quantum > 0 and quantum % rec.single_amount == 0 else -1

    def plan(
        self, rec: JobRecord, free: IntArray, search: bool = True, bounded: bool = False
    ) -> Plan | None:
        """Filter and score for every group on ``free`` (not applied); None if the gang fails.

        ``search``: when greedy placement of several groups fails, try a bounded exhaustive
        search (done for jobs in order, not for backfill candidates, to bound cycle time).
        ``bounded``: ``free`` is at most the cluster's free matrix (see :func:`plan_groups`).
        """
        assert rec.groups is not None
        spec = rec.spec
        cluster = self.cluster
        filters = self._filters.get(rec.shape_id)  # a function of the shape
        if filters is None:
            filters = self._filters[rec.shape_id] = cluster.filter(spec.placement)
        eligible, rows = filters
        preference, holders = node_bonus(cluster, self.data, spec, self.config.data_locality_weight)
        if holders is not None and rec.data_wait_until > self._now:
            # delay scheduling: only nodes holding some of the data, until the deadline —
            # unless none of them could ever take it (down, or ruled out by its labels)
            usable = holders & (cluster.up if eligible is None else eligible)
            if usable.any():
                eligible, rows = usable, None
        if spec.placement.topology is not None and spec.min_member is None:
            return self._plan_in_domain(rec, free, eligible, bounded, preference)
        greedy = plan_groups(
            rec.groups,
            free,
            eligible,
            max_per_node=spec.placement.max_tasks_per_node,
            # without min_member every group is placed whole, which is the whole gang
            min_tasks=spec.min_member or 0,
            partial=spec.min_member is not None,
            policy=self.placement,
            cluster=cluster,
            preference=preference,
            rows=rows,
            bounded=bounded,
            ledger=self.devices if bounded else None,
        )
        if greedy is not None or len(rec.groups) < 2 or spec.min_member is not None or not search:
            return greedy
        # several groups competing for nodes: greedy can miss a placement that exists
        try:
            return search_placement(
                rec.groups,
                free,
                cluster.eligible(spec.placement),
                spec.placement.max_tasks_per_node,
                budget=SEARCH_BUDGET,
            )
        except SearchBudgetExceeded:
            return None

    def _plan_in_domain(
        self,
        rec: JobRecord,
        free: IntArray,
        eligible: BoolArray | None,
        bounded: bool,
        preference: FloatArray | None,
    ) -> Plan | None:
        """:meth:`plan` for a job with a topology request: the domain(s) ``choose_domains``
        picks among the eligible rows with room, then the placement policy inside them (the
        next domain when the gang does not fit in the chosen one, a few times at most)."""
        assert rec.groups is not None
        spec = rec.spec
        request = spec.placement.topology
        assert request is not None
        cluster = self.cluster
        ledger = self.devices if bounded else None
        cand = (cluster.up if eligible is None else eligible).nonzero()[0]
        slots = np.zeros((len(rec.groups), len(cand)), np.int64)
        for k, group in enumerate(rec.groups):
            counts = task_slots(free, None, group.per_task, None, group.cols, rows=cand)
            if ledger is not None and group.demand is not None:
                counts = device_slots(ledger, group.demand, counts, cand)
            slots[k] = counts
        domains = self.shapes.domains(request.key)
        wanted = [g.replicas for g in rec.groups]
        tried: list[int] = []
        for _ in range(TOPOLOGY_TRIES):
            choice = choose_domains(request, domains, cand, slots, wanted, skip=tried)
            if choice.status is not TopologyStatus.FITS:
                return None
            mask = np.zeros(cluster.size, np.bool_)
            mask[choice.rows] = True
            found = plan_groups(
                rec.groups,
                free,
                mask,
                max_per_node=spec.placement.max_tasks_per_node,
                min_tasks=0,
                partial=False,
                policy=self.placement,
                cluster=cluster,
                preference=preference,
                rows=choice.rows,
                ledger=ledger,
            )
            if found is not None or not choice.single:
                return found
            tried.extend(choice.codes)
        return None

    def try_place(
        self,
        rec: JobRecord,
        limit: IntArray | None = None,
        view: IntArray | None = None,
        search: bool = True,
        quota_checked: bool = False,
    ) -> Allocation | None:
        """Place the whole gang now (within ``limit`` per node if given) or not at all.

        ``view`` may pass ``np.minimum(cluster.free, limit)`` when the caller keeps it;
        ``search`` as in :meth:`plan`. With tenancy the job's queue quota must admit it
        (``quota_checked``: the caller did that and set ``rec.admission``).
        """
        cluster = self.cluster
        if rec.groups is None:
            return None
        if self.tenants is not None and not quota_checked:
            verdict = self.tenants.admission(rec)
            if verdict is not None and not verdict.ok:
                return None
            rec.admission = verdict
            pin_flavours(self, rec, verdict)
        col = rec.single_column
        if col >= 0 and limit is None and cluster.all_up and self.placement.node_order:
            quantum = cluster.quantum[col]
            if quantum > 0 and quantum % rec.single_amount == 0:  # see fluid_column
                # the job needs only this column, so its sum decides
                if rec.single_total > cluster.free_total.item(col):
                    return None
                groups = rec.groups
                return first_fit_column(
                    cluster, groups[0], col, rec.single_total, rec.single_amount, rec.total
                )
        if not covers(cluster.free_total, rec.bound):
            return None
        caller_limit = limit
        exclusive = rec.spec.placement.exclusive
        if exclusive:  # idle nodes only
            idle = cluster.up & (cluster.free == cluster.capacity).all(axis=1)
            only_idle = np.where(idle[:, None], cluster.free, 0)
            limit = only_idle if limit is None else np.minimum(limit, only_idle)
            view = None
        if limit is None:
            free = cluster.free
        else:
            free = np.minimum(cluster.free, limit) if view is None else view
        plan = self.plan(rec, free, search, bounded=True)
        if plan is None:
            return None
        statement = Statement(cluster, self.devices)
        try:
            for group, nodes, counts in plan:
                statement.allocate(group, nodes, counts)
        except DevicesUnavailable:  # groups of one job competing for one node's devices
            statement.discard()
            return None
        alloc = statement.commit()
        if exclusive:
            alloc = self._whole_nodes(alloc)
        if caller_limit is not None:
            np.subtract.at(caller_limit, alloc.nodes, alloc.amounts)
        return alloc

    def _whole_nodes(self, alloc: Allocation) -> Allocation:
        """An exclusive job also holds what its tasks leave free on their nodes."""
        nodes = np.unique(alloc.nodes)
        rest = self.cluster.free[nodes].copy()
        self.cluster.take(nodes, rest, unique=True)
        return replace(
            alloc,
            nodes=np.concatenate([alloc.nodes, nodes]),
            rows=np.concatenate([alloc.amounts, rest]),
            unique=False,
            total=alloc.total + rest.sum(axis=0),
            column=-1,
            column_amounts=None,
        )

    def bind(self, rec: JobRecord, alloc: Allocation, now: float, backfilled: bool) -> StartJob:
        """Mark the job running on ``alloc`` and return the launch decision."""
        rec.allocation = alloc
        rec.start_time = now
        est_end = rec.est_end = now + rec.estimate
        rec.move(RUNNING, now, "backfilled" if backfilled else "resources available")
        job_id = rec.spec.id
        self.running.add(job_id, est_end, alloc.total, alloc)
        if self.predictions is not None:
            self.predictions.started(rec)
        if self.tenants is not None:
            self.tenants.bind(rec, now)
        stats = self.stats
        stats.started += 1
        if backfilled:
            stats.backfilled += 1
        placed = alloc.groups
        if len(placed) == 1:  # (the common case of group_placements, inline)
            group, nodes, counts = placed[0]
            device = alloc.devices[0] if alloc.devices else None
            names = self.cluster.name_array
            one = GroupPlacement(group.name, group.resources, nodes, counts, names, device)
            return StartJob(job_id, (one,), backfilled)
        declared = [g.name for g in rec.spec.task_groups]
        return StartJob(
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
