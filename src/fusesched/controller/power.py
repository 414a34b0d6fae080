"""Power saving in the live controller: idle nodes suspended, resumed when the queue needs them.

The decision is the pure policy the simulator uses (:func:`fusesched.power.saving.plan_power`);
this module observes the local agents' nodes for it and carries its plan out through the
site's own command templates (``suspend``, ``resume``: argv lists with ``{node}`` and
``{address}``, run without a shell — IPMI, ``systemctl suspend`` over ssh, a cloud API's CLI,
never hard-wired).

A node being suspended leaves the scheduler at once (state ``suspended``: nothing new is placed
there; it is not declared lost for its silence). A resumed node is ``resuming`` until its agent
is heard again (a heartbeat or a new registration), then ``up``; one that stays silent longer
than ``resume_timeout_s`` is marked ``down`` (failed). A suspend command that fails leaves the
node up. Commands run in their own threads, so a slow BMC never holds the controller's lock.
External clusters' nodes are left to those clusters. The settings are
:class:`fusesched.controller.power_config.PowerConfig` (``--power FILE``).

The policies' demand signal is what this controller sees: per pool, its busy nodes (a task
runs there, or the core has booked something there) plus the waiting jobs' node-equivalents;
for ``surge-room`` its work instead, running and waiting, and the free room on its busy nodes
(:mod:`fusesched.power.room`, counted as the simulator counts them), from what the core has
booked on each node and what the waiting jobs ask for.
"""

from __future__ import annotations

import logging
import math
import subprocess
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

# PowerConfig is imported from here too (the CLI, the server): re-exported
from fusesched.controller.power_config import SURGE_POLICIES
from fusesched.controller.power_config import PowerConfig as PowerConfig
from fusesched.model.job import JobSpec
from fusesched.model.node import LABEL_POOL, LOCAL_POOL, NodeSpec, NodeState
from fusesched.model.phases import JobPhase
from fusesched.model.resources import CPU, GPU
from fusesched.power.forecast import (
    RISE_KEEP_MARGIN,
    RISE_WAKE_MARGIN,
    DemandForecaster,
    RiseForecaster,
    SurgeTracker,
)
from fusesched.power.room import node_shares, rows_by_pool, work_and_room
from fusesched.power.saving import NodeView, PoolDemand, PowerState, RateHistory, plan_power

if TYPE_CHECKING:
    from fusesched.controller.service import Controller

log = logging.getLogger("fusesched.controller.power")

#: per pool, (the work, the free room on busy nodes), in node-equivalents
WorkAndRoom = tuple[dict[str, float], dict[str, float]]

#: per job shape (label filters, per-task resources): the first pool with nodes that fit it
#: and those nodes, or None
_Fits = dict[tuple[object, ...], tuple[str, list[NodeSpec]] | None]


@dataclass(slots=True)
class _Node:
    power: PowerState = PowerState.ON
    since: float = 0.0  # in this power state since; for an idle ON node: idle since


class PowerManager:
    """The controller's power saving (every method runs with the controller's lock held)."""

    def __init__(self, config: PowerConfig) -> None:
        self.config = config
        self.nodes: dict[str, _Node] = {}
        self.history = RateHistory()
        self._at = 0.0
        # the forecast policy's model of each pool's demand, from what this controller saw
        self.forecaster = DemandForecaster(bin_s=config.forecast_bin_s)
        # the predictive policy's: how much each pool's demand rises (arrivals)
        self.riser = RiseForecaster(bin_s=config.forecast_bin_s)
        # the surge policy's: the largest rise of each pool's demand over the wake latency
        self.surger = SurgeTracker(
            config.wake_latency_s + config.interval_s,
            config.surge_memory_days,
            config.forecast_bin_s,
            config.surge_warm_s,
        )

    # ------------------------------------------------------------------ observation

    def _busy(self, ctl: Controller) -> set[str]:
        """Nodes with a task, those where a task that outlived its job still dies or an ended
        job's booking is still held (controller/completing.py), and every node the core has
        booked something on — a batch job's other nodes run no task until its script's
        ``srun`` launches one there: not suspended."""
        busy = {task.node for _, task in ctl.tasks.values() if task.state != "exited"}
        busy.update(task.node for task in ctl.outliving.values())
        cluster = ctl.core.cluster
        for rows in ctl.core.completing.values():
            busy.update(cluster.names[row] for row in rows)
        booked = (cluster.free < cluster.capacity).any(axis=1)
        busy.update(cluster.names[row] for row in np.flatnonzero(booked).tolist())
        return busy

    def _views(self, ctl: Controller, now: float) -> list[NodeView]:
        busy = self._busy(ctl)
        views = []
        for name, node in ctl.nodes.items():
            entry = self.nodes.setdefault(name, _Node(since=now))
            is_busy = name in busy
            if entry.power is PowerState.ON and is_busy:
                entry.since = now  # idle time counts from the end of the last task
            # an operator's drained node is no capacity: never woken for work (nor suspended)
            schedulable = node.drain is None and (
                node.state is NodeState.UP
                or (node.state is NodeState.SUSPENDED and entry.power is not PowerState.ON)
            )
            views.append(
                NodeView(
                    name,
                    node.spec.labels.get(LABEL_POOL, LOCAL_POOL),
                    entry.power,
                    busy=is_busy,
                    since=entry.since,
                    schedulable=schedulable,
                )
            )
        return views

    def _demand(
        self, ctl: Controller, work: dict[str, float] | None = None
    ) -> dict[str, PoolDemand]:
        """Waiting jobs, in node-equivalents, counted against the first pool whose sleeping
        nodes could run them (a gang of two full nodes needs two nodes woken: ``queued_nodes``,
        what the policy resumes nodes for). A job no sleeping node could run is counted, as
        ``held_nodes``, against the first pool whose powered nodes could: nothing is woken for
        it, but the idle nodes it waits for (a gang for which one node is still busy) are not
        suspended under it. ``work``, when given, gets each pool's waiting jobs (queued and
        held) as ``surge-room`` counts work: unrounded, the larger of a job's CPU and GPU
        shares of one node (a 1-GPU job is 1/8 of an 8-GPU node, not a whole node), as the
        simulator counts them."""
        sleeping: dict[str, list[NodeSpec]] = {}
        powered: dict[str, list[NodeSpec]] = {}
        for name, node in ctl.nodes.items():
            entry = self.nodes.get(name)
            power = entry.power if entry is not None else PowerState.ON
            pool = node.spec.labels.get(LABEL_POOL, LOCAL_POOL)
            if node.drain is not None:  # an operator keeps it out of work
                continue
            if power in (PowerState.SUSPENDED, PowerState.SUSPENDING):
                sleeping.setdefault(pool, []).append(node.spec)
            elif power is PowerState.ON and node.state is NodeState.UP:
                powered.setdefault(pool, []).append(node.spec)
        queued: dict[str, float] = {}
        held: dict[str, float] = {}
        # which nodes fit a shape is worked out once per shape, not per job: the queue may
        # hold thousands of jobs of a few shapes (arrays), and this runs under the lock
        fits: tuple[_Fits, _Fits] = ({}, {})
        for job_id in ctl.jobs:
            rec = ctl.core.jobs.get(job_id)
            if rec is None or rec.phase is not JobPhase.QUEUED or rec.spec.dependencies:
                continue
            for part in _parts(rec.spec):
                for counts, pools, seen in ((queued, sleeping, fits[0]), (held, powered, fits[1])):
                    found = _first_fit(part, pools, seen)
                    if found is not None:
                        pool, nodes, share = found
                        counts[pool] = counts.get(pool, 0.0) + nodes
                        if work is not None:
                            work[pool] = work.get(pool, 0.0) + share
                        break
        return {
            pool: PoolDemand(queued_nodes=queued.get(pool, 0.0), held_nodes=held.get(pool, 0.0))
            for pool in sorted(set(queued) | set(held))
        }

    def _work_and_room(self, ctl: Controller) -> WorkAndRoom:
        """Per pool, the work and the free room in node-equivalents (``surge-room``;
        :mod:`fusesched.power.room`). A node's share is the larger of its CPUs and whole GPUs
        that the core has booked (running jobs, exclusive jobs' whole nodes, bookings of ended
        jobs still held) over its capacity; room is counted only on nodes that take work now
        (powered, up and not drained): a drained node's free CPUs serve no burst."""
        cluster = ctl.core.cluster
        names = [name for name in ctl.nodes if name in cluster.index]
        rows = np.array([cluster.index[name] for name in names], np.int64)
        used: list[npt.NDArray[np.float64]] = []
        caps: list[npt.NDArray[np.float64]] = []
        for resource in (CPU, GPU):
            col = cluster.columns.get(resource)
            if col is None:  # no node has it
                caps.append(np.zeros(len(rows)))
                used.append(np.zeros(len(rows)))
                continue
            cap = cluster.capacity[rows, col].astype(np.float64)
            caps.append(cap)
            used.append(np.maximum(cap - cluster.free[rows, col], 0.0))
        shares = node_shares(used[0], used[1], caps[0], caps[1])
        nodes = [ctl.nodes[name] for name in names]
        takes_work = np.array(
            [
                self.state_of(name) is PowerState.ON
                and node.state is NodeState.UP
                and node.drain is None
                for name, node in zip(names, nodes, strict=True)
            ],
            np.bool_,
        )
        pools = [node.spec.labels.get(LABEL_POOL, LOCAL_POOL) for node in nodes]
        return work_and_room(shares, takes_work, rows_by_pool(pools))

    def _forecast(
        self,
        views: Sequence[NodeView],
        demand: dict[str, PoolDemand],
        now: float,
        work_room: WorkAndRoom | None = None,
    ) -> dict[str, PoolDemand]:
        """Feed each pool's nodes needed now (busy + waiting) to the forecaster and add its
        upper estimate over the wake latency to the demand (the forecast policy uses it), or for
        the predictive policy the forecast rise of demand (arrivals), or for the surge policy the
        largest recent rise. For surge-room the work in node-equivalents (``work_room``: from
        :meth:`_work_and_room`, plus the waiting jobs' from :meth:`_demand`) stands for the busy
        nodes and the waiting demand, and its free room is passed on."""
        policy = self.config.policy
        if policy not in ("forecast", "predictive", *SURGE_POLICIES):
            return demand
        work, room = work_room if work_room is not None else ({}, {})
        needed: dict[str, float] = {}
        for view in views:
            busy = 0.0 if policy == "surge-room" else float(view.busy)
            needed[view.pool] = needed.get(view.pool, 0.0) + busy
        if policy == "surge-room":  # the work includes the waiting jobs' (in its own units)
            for pool, amount in work.items():
                needed[pool] = needed.get(pool, 0.0) + amount
        else:
            for pool, wanted in demand.items():
                needed[pool] = needed.get(pool, 0.0) + wanted.queued_nodes + wanted.held_nodes
        horizon = self.config.wake_latency_s + self.config.interval_s
        out = {}
        if policy == "predictive":  # the rise over the wake latency and SuspendTime
            self.riser.observe(now, needed)
            keep = self.config.saving.idle_threshold_s
            for pool in needed:
                wake = self.riser.upper(pool, now, horizon, RISE_WAKE_MARGIN)
                kept = self.riser.upper(pool, now, keep, RISE_KEEP_MARGIN)
                base = demand.get(pool, PoolDemand())
                out[pool] = replace(base, rise_nodes=wake, rise_keep_nodes=kept)
            return out
        if policy in SURGE_POLICIES:
            self.surger.observe(now, needed)
            for pool in needed:
                base = demand.get(pool, PoolDemand())
                surge = self.surger.upper(pool, now)
                out[pool] = replace(base, surge_nodes=surge, room_nodes=room.get(pool, 0.0))
            return out
        self.forecaster.observe(now, needed)
        for pool in needed:
            level = self.forecaster.upper(pool, now, horizon)
            out[pool] = replace(demand.get(pool, PoolDemand()), forecast_nodes=level)
        return out

    # ------------------------------------------------------------------ the loop

    def tick(self, ctl: Controller, now: float) -> None:
        if now - self._at < self.config.interval_s:
            return
        self._at = now
        views = self._views(ctl, now)
        work_room = None
        if self.config.policy == "surge-room":
            work_room = self._work_and_room(ctl)
            demand = self._demand(ctl, work_room[0])  # (adds the waiting jobs' work)
        else:
            demand = self._demand(ctl)
        demand = self._forecast(views, demand, now, work_room)
        plan = plan_power(self.config.policy, now, views, demand, self.config.saving, self.history)
        self.history = plan.history
        for name in plan.failed:
            self.nodes[name] = _Node(PowerState.FAILED, now)
            why = f"did not resume within {self.config.saving.resume_timeout_s:g} s"
            _set_state(ctl, name, NodeState.DOWN, why, now)
        for name in plan.suspend:
            self._suspend(ctl, name, now)
        for name in plan.resume:
            self._resume(ctl, name, now)

    def _suspend(self, ctl: Controller, name: str, now: float) -> None:
        self.nodes[name] = _Node(PowerState.SUSPENDING, now)
        _set_state(ctl, name, NodeState.SUSPENDED, "idle: power saving", now)
        self._run(ctl, name, self.config.suspend, "suspend")

    def _resume(self, ctl: Controller, name: str, now: float) -> None:
        self.nodes[name] = _Node(PowerState.RESUMING, now)
        log.info("resuming %s: jobs are waiting for it", name)
        self._run(ctl, name, self.config.resume, "resume")

    def _run(self, ctl: Controller, name: str, template: Sequence[str], what: str) -> None:
        node = ctl.nodes[name]
        argv = [
            w.replace("{node}", name).replace("{address}", node.inventory.address) for w in template
        ]
        timeout = self.config.command_timeout_s

        def run() -> None:
            try:
                done = subprocess.run(
                    argv, capture_output=True, text=True, timeout=timeout, check=False
                )
                problem = (
                    ""
                    if done.returncode == 0
                    else f"exited {done.returncode}: {done.stderr.strip()[:200]}"
                )
            except subprocess.TimeoutExpired:  # (its text holds the argv: secrets, say)
                problem = f"{argv[0]} timed out after {timeout:g} s"
            except OSError as exc:
                problem = f"{argv[0]}: {exc.strerror}"
            with ctl.lock:
                self._done(ctl, name, what, problem)

        threading.Thread(target=run, name=f"power-{what}-{name}", daemon=True).start()

    def _done(self, ctl: Controller, name: str, what: str, problem: str) -> None:
        entry = self.nodes.get(name)
        now = ctl.clock()
        if what == "suspend" and entry is not None and entry.power is PowerState.SUSPENDING:
            if problem:  # it is still up: back to work
                log.warning("suspending %s failed: %s", name, problem)
                self.nodes[name] = _Node(PowerState.ON, now)
                _set_state(ctl, name, NodeState.UP, f"suspend failed: {problem}", now)
            else:
                entry.power = PowerState.SUSPENDED
        elif what == "resume" and problem and entry is not None:
            # still asleep: let the policy pick it (or another node) again at the next tick
            log.warning("resuming %s: the command failed: %s", name, problem)
            if entry.power is PowerState.RESUMING:
                self.nodes[name] = _Node(PowerState.SUSPENDED, now)
        ctl.wake()

    # ------------------------------------------------------------------ agents heard

    def heard(self, ctl: Controller, name: str, registered: bool, now: float) -> None:
        """A node's agent spoke: a resuming node is back (or any sleeping node that
        registered again, having been started by other means)."""
        entry = self.nodes.get(name)
        if entry is None or entry.power is PowerState.ON:
            return
        back = entry.power in (PowerState.RESUMING, PowerState.FAILED)
        if back or (registered and entry.power is not PowerState.SUSPENDING):
            self.nodes[name] = _Node(PowerState.ON, now)
            _set_state(ctl, name, NodeState.UP, "resumed", now)
            ctl.wake()

    def state_of(self, name: str) -> PowerState:
        entry = self.nodes.get(name)
        return PowerState.ON if entry is None else entry.power


def _set_state(ctl: Controller, name: str, state: NodeState, reason: str, now: float) -> None:
    from fusesched.controller import failures

    failures.set_node_state(ctl, name, state, reason, now)


def _parts(spec: JobSpec) -> list[JobSpec]:
    """``spec`` itself; or, when a task group has label filters of its own (a hetjob
    component's ``-C``, a Kubeflow replica type's ``nodeSelector``), one spec per group under
    the job's and the group's filters: each group may need nodes of another pool woken."""
    groups = spec.task_groups
    if all(group.placement is None for group in groups):
        return [spec]
    return [
        replace(
            spec,
            task_groups=(replace(group, placement=None),),
            placement=spec.placement
            if group.placement is None
            else spec.placement.joined(group.placement),
            min_member=None,
        )
        for group in groups
    ]


def _first_fit(
    spec: JobSpec, pools: Mapping[str, list[NodeSpec]], seen: _Fits
) -> tuple[str, float, float] | None:
    """The first pool (by name) with nodes that could run ``spec``, its whole nodes needed
    there and its work there (:func:`_work_share`); None if no pool has one. ``seen``: the
    nodes found in ``pools`` so far, by shape."""
    key = (spec.placement.cache_key(), tuple(g.resources for g in spec.task_groups))
    if key not in seen:
        seen[key] = _fitting(spec, pools)
    found = seen[key]
    if found is None:
        return None
    pool, fitting = found
    return pool, _nodes_needed(spec, fitting), _work_share(spec, fitting[0])


def _fitting(
    spec: JobSpec, pools: Mapping[str, list[NodeSpec]]
) -> tuple[str, list[NodeSpec]] | None:
    """The first pool (by name) with nodes that could run ``spec``, and those nodes."""
    for pool, specs in sorted(pools.items()):
        fitting = [
            s
            for s in specs
            if spec.placement.allows(s.labels)
            and all(g.resources.fits_in(s.capacity) for g in spec.task_groups)
        ]
        if fitting:
            return pool, fitting
    return None


def _nodes_needed(spec: JobSpec, fitting: Sequence[NodeSpec]) -> float:
    """Node-equivalents of a job on nodes like ``fitting``: its largest share of one node's
    capacity over every resource it asks for (at least one node, at most those there)."""
    node = fitting[0].capacity
    share = 0.0
    for group in spec.task_groups:
        for name, amount in group.total.items():
            have = node.get(name)
            if have > 0:
                share = max(share, amount / have)
    return float(min(len(fitting), max(1, math.ceil(share - 1e-9))))


def _work_share(spec: JobSpec, node: NodeSpec) -> float:
    """A job's work on nodes like ``node`` in ``surge-room``'s node-equivalents
    (:mod:`fusesched.power.room`): the larger of its CPUs and whole GPUs over the node's,
    unrounded (as the simulator's ``PowerSim.queued_nodes``)."""
    total, have = spec.total, node.capacity
    return max((total.get(r) / have.get(r) for r in (CPU, GPU) if have.get(r) > 0), default=0.0)
