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
node), plus the waiting jobs' node-equivalents (:mod:`fusesched.power.pool_demand`, from the
core's queue: a 1-GPU job is 1/8 of an 8-GPU node, each job in one pool, an elastic job at its
minimum). Both are computed by the same pure functions as in the simulator.
"""

from __future__ import annotations

import logging
import subprocess
import threading
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

# PowerConfig is imported from here too (the CLI, the server): re-exported
from fusesched.controller.power_config import SURGE_POLICIES
from fusesched.controller.power_config import PowerConfig as PowerConfig
from fusesched.model.node import LABEL_POOL, LOCAL_POOL, NodeState
from fusesched.model.resources import CPU, GPU
from fusesched.power.counted_jobs import counted_jobs
from fusesched.power.forecast import (
    RISE_KEEP_MARGIN,
    RISE_WAKE_MARGIN,
    DemandForecaster,
    RiseForecaster,
    SurgeTracker,
)
from fusesched.power.pool_demand import node_kinds, waiting_demand
from fusesched.power.room import node_shares, rows_by_pool, work_and_room
from fusesched.power.saving import NodeView, PoolDemand, PowerState, RateHistory, plan_power
from fusesched.power.waiting import demand_signal

if TYPE_CHECKING:
    from fusesched.controller.service import Controller

log = logging.getLogger("fusesched.controller.power")

#: per pool, (the work, the free room on busy nodes), in node-equivalents
WorkAndRoom = tuple[dict[str, float], dict[str, float]]


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

    def _demand(self, ctl: Controller, now: float | None = None) -> dict[str, PoolDemand]:
        """The waiting jobs' demand per pool, counted as the simulator counts it
        (:func:`fusesched.power.pool_demand.waiting_demand`, from the core's queue: one pool
        per job, an elastic job's minimum; docs/ENERGY.md). Asleep are the nodes suspended or
        being suspended, powered those on and up; drained nodes are left out (an operator
        keeps them out of work). The jobs are :func:`fusesched.power.counted_jobs.counted_jobs`
        at ``now`` (None: the controller's clock)."""
        nodes = []
        for name, node in ctl.nodes.items():
            if node.drain is not None:
                continue
            power = self.state_of(name)
            pool = node.spec.labels.get(LABEL_POOL, LOCAL_POOL)
            if power in (PowerState.SUSPENDED, PowerState.SUSPENDING):
                nodes.append((node.spec, pool, True))
            elif power is PowerState.ON and node.state is NodeState.UP:
                nodes.append((node.spec, pool, False))
        # less jobs their licenses hold back; and those whose begin time (a requeue's
        # backoff, a reservation's start) comes before a node could boot
        lookahead = self.config.wake_latency_s + self.config.interval_s
        jobs = counted_jobs(ctl.core, ctl.clock() if now is None else now, lookahead)
        return waiting_demand(node_kinds(nodes), jobs)

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
        demand = self._demand(ctl, now)
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
