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
runs there, or the core has booked something there), or for ``surge-room`` its work and the
free room on its busy nodes (:mod:`fusesched.power.room`, from what the core has booked on each
node), plus the waiting jobs' node-equivalents (:mod:`fusesched.power.waiting`: a 1-GPU job is
1/8 of an 8-GPU node). Both are computed by the same pure functions as in the simulator.
"""

from __future__ import annotations

import logging
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
from fusesched.power.waiting import demand_signal, largest_node, node_equivalents

if TYPE_CHECKING:
    from fusesched.controller.service import Controller

log = logging.getLogger("fusesched.controller.power")

#: per pool, (the work, the free room on busy nodes), in node-equivalents
WorkAndRoom = tuple[dict[str, float], dict[str, float]]

#: per job shape (label filters, per-task resources): the first pool with nodes that fit it,
#: the largest of those nodes (CPUs, GPUs: what a share is counted against) and their names
#: (for the sleeping side: what to wake first), or None
_Fits = dict[tuple[object, ...], tuple[str, tuple[float, ...], tuple[str, ...]] | None]

#: what a waiting job's share of a node is counted in (as in the simulator)
_COUNTED = (CPU, GPU)


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

    def _demand(self, ctl: Controller) -> dict[str, PoolDemand]:
        """Waiting jobs, in node-equivalents (:func:`fusesched.power.waiting.node_equivalents`,
        the simulator's count: per job the larger of its CPU and GPU shares of the largest
        node that could run it, summed unrounded; the policy rounds the sum up, so four 1-GPU
        jobs on 8-GPU nodes wake one node, and a gang of two full nodes two; a job for the
        2-GPU nodes of a pool that also holds 8-GPU ones counts against a 2-GPU node, not
        against the node it cannot run on), counted against the
        first pool whose sleeping nodes could run them (``queued_nodes``, what the policy
        resumes nodes for). A job no sleeping node could run is counted, as ``held_nodes``,
        against the first pool whose powered nodes could: nothing is woken for it, but the
        idle nodes it waits for (a gang for which one node is still busy) are not suspended
        under it. The sleeping nodes that could run a queued job are named in ``wake_first``:
        the policy resumes them before the pool's others (in a pool of mixed node sizes, not
        the big node a job constrained to the small ones cannot use)."""
        sleeping: dict[str, list[NodeSpec]] = {}
        powered: dict[str, list[NodeSpec]] = {}
        for name, node in ctl.nodes.items():
            pool = node.spec.labels.get(LABEL_POOL, LOCAL_POOL)
            entry = self.nodes.get(name)
            power = entry.power if entry is not None else PowerState.ON
            if node.drain is not None:  # an operator keeps it out of work
                continue
            if power in (PowerState.SUSPENDED, PowerState.SUSPENDING):
                sleeping.setdefault(pool, []).append(node.spec)
            elif power is PowerState.ON and node.state is NodeState.UP:
                powered.setdefault(pool, []).append(node.spec)
        # per pool and node size, what each waiting job asks for (CPUs, GPUs): to wake for,
        # and held
        waiting: tuple[dict[tuple[str, tuple[float, ...]], list[list[float]]], ...] = ({}, {})
        # which nodes fit a shape is worked out once per shape, not per job: the queue may
        # hold thousands of jobs of a few shapes (arrays), and this runs under the lock
        fits: tuple[_Fits, _Fits] = ({}, {})
        for job_id in ctl.jobs:
            rec = ctl.core.jobs.get(job_id)
            if rec is None or rec.phase is not JobPhase.QUEUED or rec.spec.dependencies:
                continue
            for part in _parts(rec.spec):
                for asks, pools, seen in zip(waiting, (sleeping, powered), fits, strict=True):
                    found = _first_fit(part, pools, seen)
                    if found is not None:
                        total = part.total
                        asks.setdefault(found[:2], []).append([total.get(r) for r in _COUNTED])
                        break
        queued: dict[str, float] = {}
        held: dict[str, float] = {}
        for asks, counts in zip(waiting, (queued, held), strict=True):
            for (pool, scale), rows in asks.items():
                amount = node_equivalents(np.array(rows, np.float64), np.array(scale))
                counts[pool] = counts.get(pool, 0.0) + amount
        # every shape found on the sleeping side was counted in queued_nodes: its nodes first
        # (per shape, in queue order; a dict as an ordered set)
        wake: dict[str, dict[str, None]] = {}
        for found in fits[0].values():
            if found is not None:
                wake.setdefault(found[0], {}).update(dict.fromkeys(found[2]))
        return {
            pool: PoolDemand(
                queued_nodes=queued.get(pool, 0.0),
                held_nodes=held.get(pool, 0.0),
                wake_first=tuple(wake.get(pool, ())),
            )
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
        """Feed each pool's nodes needed now (busy + waiting, as the simulator counts them:
        :func:`fusesched.power.waiting.demand_signal`) to the forecaster and add its upper
        estimate over the wake latency to the demand (the forecast policy uses it), or for the
        predictive policy the forecast rise of demand (arrivals), or for the surge policy the
        largest recent rise. For surge-room the work in node-equivalents (``work_room``: from
        :meth:`_work_and_room`) stands for the busy nodes, and its free room is passed on. The
        waiting jobs (queued and held) count in node-equivalents, unrounded (:meth:`_demand`)."""
        policy = self.config.policy
        if policy not in ("forecast", "predictive", *SURGE_POLICIES):
            return demand
        work, room = work_room if work_room is not None else ({}, {})
        running: dict[str, float] = {}
        for view in views:
            running[view.pool] = running.get(view.pool, 0.0) + float(view.busy)
        if policy == "surge-room":
            running = {pool: work.get(pool, 0.0) for pool in running.keys() | work.keys()}
        waiting = {pool: d.queued_nodes + d.held_nodes for pool, d in demand.items()}
        needed = demand_signal(running, waiting)
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
        work_room = self._work_and_room(ctl) if self.config.policy == "surge-room" else None
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
) -> tuple[str, tuple[float, ...], tuple[str, ...]] | None:
    """The first pool (by name) with nodes that could run ``spec``, the largest of those
    nodes and their names; None if no pool has one. ``seen``: what was found in ``pools`` so
    far, by shape."""
    key = (spec.placement.cache_key(), tuple(g.resources for g in spec.task_groups))
    if key not in seen:
        seen[key] = _fitting(spec, pools)
    return seen[key]


def _fitting(
    spec: JobSpec, pools: Mapping[str, list[NodeSpec]]
) -> tuple[str, tuple[float, ...], tuple[str, ...]] | None:
    """The first pool (by name) with nodes that could run ``spec``, the largest of those
    nodes (per counted resource: :func:`fusesched.power.waiting.largest_node`) and their
    names."""
    for pool, specs in sorted(pools.items()):
        fitting = [
            s
            for s in specs
            if spec.placement.allows(s.labels)
            and all(g.resources.fits_in(s.capacity) for g in spec.task_groups)
        ]
        if fitting:
            sizes = np.array([[s.capacity.get(r) for r in _COUNTED] for s in fitting], np.float64)
            largest = tuple(largest_node(sizes).tolist())
            return pool, largest, tuple(s.name for s in fitting)
    return None
