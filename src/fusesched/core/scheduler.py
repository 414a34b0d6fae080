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

from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np

from fusesched.core.backfill import BACKFILLERS
from fusesched.core.cluster import ClusterArrays, IntArray
from fusesched.core.placement import (
    Allocation,
    GroupShape,
    Statement,
    choose_nodes,
    task_slots,
)
from fusesched.core.records import JobRecord, WaitingQueue
from fusesched.core.running import RunningSet
from fusesched.model.events import (
    Decision,
    Event,
    GroupPlacement,
    JobCancelRequested,
    JobExited,
    JobSubmitted,
    NodeAdded,
    NodeStateChanged,
    RejectJob,
    StartJob,
    StopJob,
)
from fusesched.model.job import DependencyKind, JobSpec
from fusesched.model.phases import JobPhase
from fusesched.model.resources import CPU
from fusesched.policies.placement import PLACEMENT_POLICIES
from fusesched.policies.queue_order import QUEUE_ORDERS, JobFacts
from fusesched.policies.registry import CoreConfig

#: A plan: per group, the node rows and task counts (not yet applied to the cluster).
Plan = list[tuple[GroupShape, IntArray, IntArray]]


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
        self.jobs: dict[str, JobRecord] = {}
        self.queue = WaitingQueue(self.order, 0)
        self.running = RunningSet(0)
        self.stats = CoreStats()
        self._dependents: dict[str, list[str]] = {}
        self._array_running: dict[str, int] = {}
        self._array_held: dict[str, list[JobRecord]] = {}
        self._seq = 0
        self._shapes: dict[tuple[object, ...], tuple[list[GroupShape] | None, IntArray, str]] = {}
        # change tracking: a cycle with nothing freed and nothing new can start nothing
        self._changed = False
        self._fresh: list[JobRecord] = []
        self.blocked_head: JobRecord | None = None
        self.reservation: object | None = None  # the backfill policy's cached reservation
        self.last_reservation: tuple[str, float] | None = None

    # ================================================================== entry points

    def step(self, now: float, events: Iterable[Event] = ()) -> list[Decision]:
        """Apply every event, then run one scheduling cycle."""
        out: list[Decision] = []
        for event in events:
            out.extend(self.handle(event, now))
        out.extend(self.cycle(now))
        return out

    def handle(self, event: Event, now: float) -> list[Decision]:
        """Apply one event to the state; returns decisions it forces (rejections, stops)."""
        if isinstance(event, JobSubmitted):
            return self._submit(event.job, now)
        if isinstance(event, JobExited):
            return self._exited(event, now)
        if isinstance(event, JobCancelRequested):
            return self._cancel(event.job_id, event.reason, now)
        if isinstance(event, NodeAdded):
            self.cluster.add_node(event.node, event.state)
            self._widen()
            self._cluster_changed()
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
        queue = self.queue
        changed = self._changed or self.order.dynamic
        fresh = self._fresh
        self._changed = False
        self._fresh = []
        if not len(queue) or not (changed or fresh):
            return []
        out: list[Decision] = []
        queue.reorder(now)  # phase 1: order
        while len(queue):
            rec = queue.records[0]
            if rec is self.blocked_head and not changed:
                break  # failed before with more room
            alloc = self.try_place(rec)  # phases 2-5: filter, score, reserve, permit
            if alloc is None:
                break
            queue.remove_at([0])
            out.append(self.bind(rec, alloc, now, backfilled=False))  # phase 6: bind
        if not len(queue):
            self.blocked_head = None
            return out
        head = queue.records[0]
        if head is not self.blocked_head:
            changed = True
            self.blocked_head = head
            self.reservation = None
        elif changed:
            self.reservation = None
        if self.config.backfill != "none":
            only = None if changed else fresh
            out.extend(BACKFILLERS[self.config.backfill](self, now, only))
        return out

    def _cluster_changed(self) -> None:
        self._changed = True
        self._shapes.clear()

    # ================================================================== events

    def _submit(self, spec: JobSpec, now: float) -> list[Decision]:
        if spec.id in self.jobs:
            return [RejectJob(spec.id, f"job id {spec.id!r} is already in use")]
        if spec.array is not None and spec.array_index is None:
            out: list[Decision] = []
            for child in spec.expand_array():
                out.extend(self._submit(child, now))
            return out
        rec = self._compile(spec, now)
        self.jobs[spec.id] = rec
        if rec.never_fits:
            return self._reject(rec, rec.never_fits, now)
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

    def _compile(self, spec: JobSpec, now: float) -> JobRecord:
        """The job's record, with its task groups in array form (cached per job shape)."""
        self._seq += 1
        placement = spec.placement
        shape_key = (
            spec.task_groups,
            placement.cache_key() if placement.constrained else None,
            placement.max_tasks_per_node,
            spec.min_member,
        )
        shape = self._shapes.get(shape_key)
        if shape is None:
            shape = self._shapes[shape_key] = self._shape(spec)
        groups, total, reason = shape
        estimate = (
            spec.walltime_s if spec.walltime_s is not None else self.config.default_estimate_s
        )
        cpu = self.cluster.columns.get(CPU)
        facts = JobFacts(
            submit=spec.submit_time,
            estimate=estimate,
            procs=float(total[cpu]) / 1000.0 if cpu is not None else 0.0,
            priority=spec.priority,
            qos_rank=spec.qos.rank,
        )
        rec = JobRecord(
            spec=spec,
            seq=self._seq,
            phase=JobPhase.PENDING,
            groups=groups,
            total=total,
            estimate=estimate,
            facts=facts,
        )
        rec.never_fits = reason
        rec.single_column, rec.single_amount = self._single_column(spec, groups)
        return rec

    def _shape(self, spec: JobSpec) -> tuple[list[GroupShape] | None, IntArray, str]:
        cluster = self.cluster
        groups: list[GroupShape] | None = []
        for group in spec.task_groups:
            vec = cluster.vector(group.resources)
            if vec is None or groups is None:
                groups = None
                continue
            cluster.note_request(vec)
            groups.append(GroupShape(group.name, group.replicas, vec, group.resources))
        total = np.zeros(len(cluster.columns), dtype=np.int64)
        for g in groups or ():
            total += g.per_task * g.replicas
        return groups, total, self._never_fits(spec, groups)

    def _never_fits(self, spec: JobSpec, groups: list[GroupShape] | None) -> str:
        """Why no node of the cluster, empty, could ever hold the job ('' if one could)."""
        if groups is None:
            return "asks for a resource that no node offers"
        if not self.config.reject_unschedulable:
            return ""
        cluster = self.cluster
        capacity = cluster.capacity.copy()
        placement = spec.placement
        allowed = cluster.allowed(placement)
        placed = 0
        for group in groups:
            counts = task_slots(capacity, allowed, group.per_task, placement.max_tasks_per_node)
            take = min(int(counts.sum()), group.replicas)
            placed += take
            if take < group.replicas and spec.min_member is None:
                return (
                    f"task group {group.name!r} needs {group.replicas} tasks of "
                    f"{group.resources.to_spec()} but the whole cluster holds at most {take}"
                )
            pick = choose_nodes(counts, take, self.placement, cluster, group.per_task, None)
            if pick is not None:
                np.subtract.at(capacity, pick[0], pick[1][:, None] * group.per_task[None, :])
        if placed < spec.gang_size:
            return f"gang of {spec.gang_size} tasks cannot fit even on an empty cluster"
        return ""

    def _enqueue(self, rec: JobRecord, now: float, reason: str) -> None:
        rec.move(JobPhase.QUEUED, now, reason)
        spec = rec.spec
        parent = spec.array_parent
        if parent and spec.array and spec.array.max_parallel is not None:
            if self._array_running.get(parent, 0) >= spec.array.max_parallel:
                self._array_held.setdefault(parent, []).append(rec)
                return
            self._array_running[parent] = self._array_running.get(parent, 0) + 1
        if not self.order.dynamic:
            rec.key = self.order.key(rec.facts, now)
        self.queue.push(rec, now)
        self._fresh.append(rec)

    def _exited(self, event: JobExited, now: float) -> list[Decision]:
        rec = self.jobs.get(event.job_id)
        if rec is None or rec.phase is not JobPhase.RUNNING:
            raise KeyError(f"job {event.job_id!r} is not running")
        self._release(rec, now)
        rec.exit_code = event.exit_code
        if rec.stop_requested:
            rec.move(JobPhase.CANCELLED, now, rec.stop_requested)
        elif event.timed_out:
            rec.move(JobPhase.TIMEOUT, now, event.reason or "walltime exceeded")
        elif event.exit_code == 0:
            rec.move(JobPhase.COMPLETED, now, event.reason or "exit 0")
        else:
            rec.move(JobPhase.FAILED, now, event.reason or f"exit {event.exit_code}")
        return self._settle_dependents(rec, now)

    def _release(self, rec: JobRecord, now: float) -> None:
        assert rec.allocation is not None and rec.est_end is not None
        alloc = rec.allocation
        self.cluster.give(alloc.nodes, alloc.amounts, unique=alloc.unique, total=alloc.total)
        self.running.remove(rec.id, rec.est_end)
        self._changed = True
        rec.end_time = now
        parent = rec.spec.array_parent
        if parent in self._array_running:
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
        for dep_id in self._dependents.pop(rec.id, []):
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
            self._dequeue(rec)
            self._changed = True
        if rec.phase.terminal:
            return []
        rec.move(JobPhase.CANCELLED, now, reason)
        return self._settle_dependents(rec, now)

    def _dequeue(self, rec: JobRecord) -> None:
        parent = rec.spec.array_parent
        held = self._array_held.get(parent or "")
        if held and rec in held:
            held.remove(rec)
            return
        self.queue.remove(rec)
        if parent in self._array_running:
            self._array_running[parent] -= 1

    def _reject(self, rec: JobRecord, reason: str, now: float) -> list[Decision]:
        self.stats.rejected += 1
        rec.move(JobPhase.CANCELLED, now, f"rejected: {reason}")
        return [RejectJob(rec.id, reason), *self._settle_dependents(rec, now)]

    def _widen(self) -> None:
        width = len(self.cluster.columns)
        self.queue.widen(width)
        self.running.widen(width)
        for rec in self.jobs.values():
            if len(rec.total) < width:
                rec.total = np.concatenate([rec.total, np.zeros(width - len(rec.total), np.int64)])
                for g in rec.groups or ():
                    g.per_task = np.concatenate(
                        [g.per_task, np.zeros(width - len(g.per_task), np.int64)]
                    )

    # ================================================================== placement

    def fluid_column(self, rec: JobRecord) -> int:
        """The single column whose free sum decides exactly if ``rec`` fits, or -1.

        That holds for one task group of one resource, without label constraints, whose task
        size divides the column's quantum (so every node's free amount is a multiple of it).
        """
        col = rec.single_column
        if col < 0:
            return -1
        quantum = self.cluster.quantum[col]
        return col if quantum > 0 and quantum % rec.single_amount == 0 else -1

    @staticmethod
    def _single_column(spec: JobSpec, groups: list[GroupShape] | None) -> tuple[int, int]:
        placement = spec.placement
        if (
            groups is None
            or len(groups) != 1
            or len(groups[0].cols) != 1
            or spec.min_member is not None
            or placement.constrained
            or placement.preferred
            or placement.max_tasks_per_node is not None
        ):
            return -1, 0
        col = int(groups[0].cols[0])
        return col, int(groups[0].per_task[col])

    def plan(self, rec: JobRecord, free: IntArray) -> Plan | None:
        """Filter and score for every group on ``free`` (not applied); None if the gang fails."""
        assert rec.groups is not None
        spec = rec.spec
        cluster = self.cluster
        eligible = (
            None
            if cluster.all_up and not spec.placement.constrained
            else cluster.eligible(spec.placement)
        )
        preference = cluster.preference(spec.placement)
        work = free
        plan: Plan = []
        placed = 0
        partial_ok = spec.min_member is not None
        for index, group in enumerate(rec.groups):
            counts = task_slots(
                work, eligible, group.per_task, spec.placement.max_tasks_per_node, group.cols
            )
            available = int(counts.sum())
            wanted = min(group.replicas, available) if partial_ok else group.replicas
            if wanted == 0:
                continue
            pick = choose_nodes(
                counts, wanted, self.placement, cluster, group.per_task, preference, work
            )
            if pick is None:
                return None
            plan.append((group, pick[0], pick[1]))
            placed += wanted
            if index + 1 < len(rec.groups):
                if work is free:
                    work = free.copy()
                np.subtract.at(work, pick[0], pick[1][:, None] * group.per_task[None, :])
        return plan if placed >= spec.gang_size else None

    def try_place(self, rec: JobRecord, limit: IntArray | None = None) -> Allocation | None:
        """Place the whole gang now (within ``limit`` per node if given) or not at all."""
        cluster = self.cluster
        if rec.groups is None or not (rec.total <= cluster.free_total).all():
            return None
        if limit is None and self.placement.node_order and cluster.all_up:
            col = self.fluid_column(rec)
            if col >= 0:
                return self._first_fit_fluid(rec, col)
        free = cluster.free if limit is None else np.minimum(cluster.free, limit)
        plan = self.plan(rec, free)
        if plan is None:
            return None
        statement = Statement(cluster)
        for group, nodes, counts in plan:
            statement.allocate(group, nodes, counts)
        alloc = statement.commit()
        if limit is not None:
            np.subtract.at(limit, alloc.nodes, alloc.amounts)
        return alloc

    def _first_fit_fluid(self, rec: JobRecord, col: int) -> Allocation:
        """Fast path of :meth:`try_place` for one group of one divisible resource, first fit.

        The caller has checked that the free sum suffices, which for such a job means it fits;
        the result is what :meth:`plan` + :class:`Statement` would produce.
        """
        assert rec.groups is not None
        group = rec.groups[0]
        cluster = self.cluster
        counts = cluster.free[:, col] // rec.single_amount
        cum = counts.cumsum()
        last = int(cum.searchsorted(group.replicas))
        prefix = counts[: last + 1]
        nodes = prefix.nonzero()[0]
        takes = prefix[nodes]
        takes[-1] -= int(cum[last]) - group.replicas
        amounts = takes[:, None] * group.per_task[None, :]
        cluster.take(nodes, amounts, unique=True, total=rec.total)
        return Allocation(nodes, amounts, True, rec.total, [(group, nodes, takes)])

    def bind(self, rec: JobRecord, alloc: Allocation, now: float, backfilled: bool) -> StartJob:
        """Mark the job running on ``alloc`` and return the launch decision."""
        rec.allocation = alloc
        rec.start_time = now
        rec.est_end = now + rec.estimate
        reason = "backfilled" if backfilled else "resources available"
        rec.move(JobPhase.RUNNING, now, reason)
        self.running.add(rec.id, rec.est_end, rec.total)
        self.stats.started += 1
        self.stats.backfilled += backfilled
        names = self.cluster.name_array
        groups = tuple(
            GroupPlacement(group.name, group.resources, nodes, tuple(counts.tolist()), names)
            for group, nodes, counts in alloc.groups
        )
        return StartJob(rec.id, groups, backfilled=backfilled)
