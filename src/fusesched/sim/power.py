"""Energy in the simulator: node power states, power saving through the core, metered energy.

:class:`PowerSim` is the optional power hook of :class:`~fusesched.sim.engine.Simulation`
(``Simulation(..., power=PowerSim(PowerSetup(...)))``). It

* tracks what every node runs (from the core's ``StartJob`` decisions and the exits), so each
  node's CPU and GPU utilisation (allocated share of its capacity) is known at every instant;
* every ``tick_s`` runs the pure power-saving policy (:func:`fusesched.power.saving.plan_power`)
  on what a live controller would see: power states, idle times, the waiting jobs' demand and,
  for ``forecast``, the demand forecast (:class:`fusesched.power.forecast.DemandForecaster`,
  fed only with the demand seen so far), for ``predictive`` the forecast rise of demand
  (:class:`fusesched.power.forecast.RiseForecaster`);
* applies its plan through the core: a suspended node is ``NodeStateChanged(SUSPENDED)`` at
  once (it takes no jobs); a resumed node boots for its type's ``wake_s`` and is
  ``NodeStateChanged(UP)`` then; a resume that times out marks the node ``DOWN``;
* integrates each node's power (:class:`fusesched.power.model.PowerModel`) over time within the
  metering window: a powered node by its utilisation, a booting or shutting-down one at idle
  power, a suspended one at its standby power.

With ``policy="always-on"`` nothing is ever suspended and the schedule is the same as without
the hook (the ticks are extra core cycles that start nothing new). Its set-up
(:class:`PowerSetup`) and report (:class:`PowerReport`): :mod:`fusesched.sim.power_setup`.
"""

from __future__ import annotations

import heapq
import math
from collections import Counter
from collections.abc import Mapping, Sequence
from types import MappingProxyType
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

from fusesched.model.events import Decision, Event, NodeStateChanged, StartJob
from fusesched.model.node import LABEL_POOL, NodeSpec, NodeState
from fusesched.model.resources import CPU, GPU, Resources
from fusesched.power.counted_jobs import counted_jobs
from fusesched.power.forecast import DemandForecaster, RiseForecaster, SurgeTracker
from fusesched.power.model import kwh
from fusesched.power.pool_demand import NodeKind, waiting_demand
from fusesched.power.room import node_shares, rows_by_pool, work_and_room
from fusesched.power.saving import NodeView, PoolDemand, PowerState, RateHistory, plan_power
from fusesched.power.waiting import demand_signal

# the set-up and the report (sim/power_setup.py), imported from here too: re-exported
from fusesched.sim.power_setup import DEFAULT_POOL as DEFAULT_POOL
from fusesched.sim.power_setup import LABEL_POWER_MODEL as LABEL_POWER_MODEL
from fusesched.sim.power_setup import PowerReport as PowerReport
from fusesched.sim.power_setup import PowerSetup as PowerSetup
from fusesched.sim.power_setup import default_node_type as default_node_type

if TYPE_CHECKING:
    from fusesched.core.scheduler import SchedulerCore

FloatArray = npt.NDArray[np.float64]

# time categories of a node, for the report
BUSY, IDLE, TRANSITION, SUSPENDED = 0, 1, 2, 3
CATEGORIES = ("busy", "idle", "transition", "suspended")


class PowerSim:
    """The engine's power hook (see the module docstring)."""

    def __init__(self, setup: PowerSetup | None = None) -> None:
        self.setup = setup or PowerSetup()
        self.policy = self.setup.policy
        self._core: SchedulerCore | None = None
        self._rng = np.random.default_rng(self.setup.seed)
        self.history = RateHistory()
        self.suspends = self.resumes = 0
        self.failed: list[str] = []
        self.samples: list[tuple[float, float, int, int]] = []
        # with ``record``: busy nodes per pool (``pool_names`` order) at every tick
        self.pool_busy: list[tuple[float, tuple[int, ...]]] = []

    # ------------------------------------------------------------------ set-up

    def attach(self, core: SchedulerCore, nodes: Sequence[NodeSpec]) -> None:
        """Called once the nodes are added to the core (rows in the order of ``nodes``)."""
        setup = self.setup
        self._core = core
        for row, spec in enumerate(nodes):
            if core.cluster.index.get(spec.name) != row:
                raise ValueError("the power hook needs the nodes in the core's row order")
        self.names = [n.name for n in nodes]
        self.index = {name: i for i, name in enumerate(self.names)}
        self.pools = [n.labels.get(LABEL_POOL, DEFAULT_POOL) for n in nodes]
        self.pool_names = sorted(set(self.pools))
        self.pool_rows = rows_by_pool(self.pools)
        types = [setup.node_type(n) for n in nodes]
        missing = sorted(set(types) - set(setup.models))
        if missing:
            raise ValueError(f"no power model for node type(s) {', '.join(missing)}")
        self.types = types
        self.models = [setup.models[t] for t in types]
        size = len(nodes)
        self.cpu_cap = np.array([n.capacity.get(CPU) for n in nodes], np.float64)
        self.gpu_cap = np.array([n.capacity.get(GPU) for n in nodes], np.float64)
        self.cpu_used = np.zeros(size)
        self.gpu_used = np.zeros(size)
        self.state = [PowerState.ON] * size
        self._in_state: Counter[PowerState] = Counter({PowerState.ON: size})
        self.since = np.zeros(size)  # power state entered, or idle since (ON and idle)
        self.watts = np.zeros(size)
        self.category = np.full(size, IDLE, np.int64)
        self.t_last = np.zeros(size)
        self.energy = np.zeros(size)  # joules within the metering window
        self.seconds = np.zeros((size, len(CATEGORIES)))
        self._views: list[NodeView | None] = [None] * size
        self._stale: set[int] = set(range(size))  # rows whose view must be rebuilt
        self._jobs: dict[str, tuple[npt.NDArray[np.int64], FloatArray, FloatArray]] = {}
        self._transitions: list[tuple[float, int, int, str]] = []  # (time, seq, row, to)
        self._seq = 0
        self._next_tick = 0.0
        self._due: list[Event] = []
        wake = max((m.wake_s for m in self.models), default=0.0)
        self.lookahead_s = (
            setup.lookahead_s if setup.lookahead_s is not None else wake + setup.tick_s
        )
        self.forecaster = (
            DemandForecaster(
                setup.forecast_bin_s, margin=setup.forecast_margin, params=setup.forecast_params
            )
            if self.policy == "forecast"
            else None
        )
        self.riser = (
            RiseForecaster(setup.forecast_bin_s, params=setup.forecast_params)
            if self.policy == "predictive"
            else None
        )
        self.surger = (
            SurgeTracker(
                self.lookahead_s,
                setup.surge_memory_days,
                setup.forecast_bin_s,
                setup.surge_warm_s,
            )
            if self.policy in ("surge", "surge-room")
            else None
        )
        # the waiting jobs' demand (power/pool_demand.py): the nodes by pool and size, as the
        # live controller groups them, and which are asleep (suspended, suspending) or on
        kinds: dict[tuple[str, Resources], list[int]] = {}
        for row, spec in enumerate(nodes):
            kinds.setdefault((self.pools[row], spec.capacity), []).append(row)
        self._kinds = [(key, np.array(rows, np.int64)) for key, rows in kinds.items()]
        self._specs = np.empty(size, dtype=object)
        self._specs[:] = list(nodes)
        self._asleep = np.zeros(size, np.bool_)
        self._on = np.ones(size, np.bool_)
        self._kinds_now: list[NodeKind] | None = None
        self._refresh(np.arange(size, dtype=np.int64), 0.0)

    # ------------------------------------------------------------------ engine calls

    def next_time(self) -> float:
        """The next instant the hook needs a step: a power transition or a control tick."""
        t = self._next_tick
        if self._transitions:
            t = min(t, self._transitions[0][0])
        return t

    def active(self) -> bool:
        """Whether the simulation must go on for power's sake: a node is booting or jobs wait
        while some node is asleep."""
        count = self._in_state
        if count[PowerState.RESUMING]:
            return True
        core = self._core
        assert core is not None
        if not len(core.queue):
            return False
        return count[PowerState.SUSPENDED] + count[PowerState.SUSPENDING] > 0

    def due(self, now: float) -> list[Event]:
        """Events for the core at ``now``: nodes that finished booting come up."""
        out: list[Event] = []
        heap = self._transitions
        while heap and heap[0][0] <= now:
            _, _, row, to = heapq.heappop(heap)
            if to == "up":
                if self.state[row] is not PowerState.RESUMING:
                    continue
                self._set_state(row, PowerState.ON, now)
                out.append(NodeStateChanged(self.names[row], NodeState.UP, "resumed"))
            elif self.state[row] is PowerState.SUSPENDING:
                self._set_state(row, PowerState.SUSPENDED, now)
        return out

    def after_step(self, now: float, exited: Sequence[str], decisions: Sequence[Decision]) -> None:
        """Account for the step's exits and starts, then run the policy if a tick is due."""
        for job_id in exited:
            placed = self._jobs.pop(job_id, None)
            if placed is None:
                continue
            rows, cpu, gpu = placed
            np.subtract.at(self.cpu_used, rows, cpu)
            np.subtract.at(self.gpu_used, rows, gpu)
            self._refresh(np.unique(rows), now)
        for decision in decisions:
            if isinstance(decision, StartJob):
                self._start(decision, now)
        if now >= self._next_tick:
            self._control(now)
            if self.setup.record:
                awake = self._in_state[PowerState.ON] + self._in_state[PowerState.RESUMING]
                per_pool = self._busy_by_pool()
                busy = sum(per_pool.values())
                self.samples.append((now, float(self.watts.sum()), awake, busy))
                self.pool_busy.append((now, tuple(per_pool.values())))
            self._next_tick = (math.floor(now / self.setup.tick_s) + 1) * self.setup.tick_s

    def _busy_by_pool(self) -> dict[str, int]:
        """Per pool (``pool_names`` order), the nodes running something."""
        used = (self.cpu_used > 0) | (self.gpu_used > 0)
        return {pool: int(used[rows].sum()) for pool, rows in self.pool_rows.items()}

    def nodes_changed(self, names: Sequence[str]) -> None:
        """The engine changed these nodes' core state itself (an injected outage): their
        views, which say whether a node is schedulable, are rebuilt at the next tick."""
        for name in names:
            row = self.index[name]
            self._views[row] = None
            self._stale.add(row)
        self._kinds_now = None

    def finish(self, now: float) -> PowerReport:
        """Close the books at the end of the simulation (or of the metering window)."""
        start, end = self._window(now)
        self._advance(np.arange(len(self.names), dtype=np.int64), max(now, end))
        by_type: dict[str, float] = {}
        for t, e in zip(self.types, self.energy.tolist(), strict=True):
            by_type[t] = by_type.get(t, 0.0) + kwh(e)
        hours = self.seconds.sum(axis=0) / 3600.0
        return PowerReport(
            policy=self.policy,
            start_s=start,
            end_s=end,
            energy_kwh=kwh(float(self.energy.sum())),
            energy_by_type_kwh=MappingProxyType(by_type),
            node_hours=MappingProxyType(dict(zip(CATEGORIES, hours.tolist(), strict=True))),
            suspends=self.suspends,
            resumes=self.resumes,
            failed=len(self.failed),
        )

    # ------------------------------------------------------------------ internals

    def _window(self, now: float) -> tuple[float, float]:
        meter = self.setup.meter
        return meter if meter is not None else (0.0, now)

    def _start(self, decision: StartJob, now: float) -> None:
        rows_parts = []
        cpu_parts = []
        gpu_parts = []
        for g in decision.groups:
            counts = g.row_counts.astype(np.float64)
            rows_parts.append(g.rows)
            cpu_parts.append(counts * g.resources.get(CPU))
            gpu_parts.append(counts * g.resources.get(GPU))
        rows = np.concatenate(rows_parts) if len(rows_parts) > 1 else rows_parts[0]
        cpu = np.concatenate(cpu_parts) if len(cpu_parts) > 1 else cpu_parts[0]
        gpu = np.concatenate(gpu_parts) if len(gpu_parts) > 1 else gpu_parts[0]
        self._jobs[decision.job_id] = (rows, cpu, gpu)
        np.add.at(self.cpu_used, rows, cpu)
        np.add.at(self.gpu_used, rows, gpu)
        self._refresh(np.unique(rows), now)

    def _advance(self, rows: npt.NDArray[np.int64], now: float) -> None:
        """Add the energy and time of ``rows`` from their last change to ``now``."""
        start, end = self.setup.meter if self.setup.meter is not None else (0.0, math.inf)
        lo = np.maximum(self.t_last[rows], start)
        hi = np.minimum(now, end)
        span = np.maximum(0.0, hi - lo)
        self.energy[rows] += self.watts[rows] * span
        self.seconds[rows, self.category[rows]] += span
        self.t_last[rows] = np.maximum(self.t_last[rows], now)

    def _refresh(self, rows: npt.NDArray[np.int64], now: float) -> None:
        """Recompute the power of ``rows`` after a change at ``now`` (books closed first)."""
        self._advance(rows, now)
        for row in rows.tolist():
            model = self.models[row]
            state = self.state[row]
            busy = self.cpu_used[row] > 0 or self.gpu_used[row] > 0
            if state is PowerState.ON:
                cpu = self.cpu_used[row] / self.cpu_cap[row] if self.cpu_cap[row] else 0.0
                gpu = self.gpu_used[row] / self.gpu_cap[row] if self.gpu_cap[row] else 0.0
                if model.gpus:  # a GPU job drives its host (data loading, communication)
                    cpu = max(cpu, gpu)
                self.watts[row] = model.power(cpu, gpu)
                was_busy = self.category[row] == BUSY
                self.category[row] = BUSY if busy else IDLE
                if was_busy and not busy:
                    self.since[row] = now  # idle from now on
            elif state in (PowerState.RESUMING, PowerState.SUSPENDING):
                self.watts[row] = model.node_idle_w
                self.category[row] = TRANSITION
            else:
                self.watts[row] = model.suspended_w
                self.category[row] = SUSPENDED
            self._views[row] = None
            self._stale.add(row)

    def _set_state(self, row: int, state: PowerState, now: float) -> None:
        self._advance(np.array([row], np.int64), now)
        self._in_state[self.state[row]] -= 1
        self._in_state[state] += 1
        self.state[row] = state
        self._asleep[row] = state is PowerState.SUSPENDED or state is PowerState.SUSPENDING
        self._on[row] = state is PowerState.ON
        self._kinds_now = None
        self.since[row] = now
        self.category[row] = IDLE  # so that _refresh does not reset ``since`` again
        self._refresh(np.array([row], np.int64), now)

    def _view(self, row: int) -> NodeView:
        view = self._views[row]
        if view is None:
            busy = bool(self.cpu_used[row] > 0 or self.gpu_used[row] > 0)
            state = self.state[row]
            core = self._core
            assert core is not None
            core_state = core.cluster.states[row]
            schedulable = core_state is NodeState.UP or (
                core_state is NodeState.SUSPENDED and state is not PowerState.ON
            )
            view = NodeView(
                self.names[row],
                self.pools[row],
                state,
                busy,
                float(self.since[row]),
                schedulable,
            )
            self._views[row] = view
        return view

    def waiting(self, now: float) -> dict[str, PoolDemand]:
        """Per pool, the waiting jobs' demand (``queued_nodes``, ``held_nodes``,
        ``wake_first``, ``unfit_powered``), counted as the live controller counts it
        (:func:`fusesched.power.pool_demand.waiting_demand`, of
        :func:`fusesched.power.counted_jobs.counted_jobs`: the core's queue less jobs their
        licenses hold back, and the jobs due within the look-ahead): asleep are the
        suspended and suspending nodes, powered those on and up in the core."""
        core = self._core
        assert core is not None
        jobs = counted_jobs(core, now, self.lookahead_s)  # (begin times etc.: by the boot)
        if not jobs:
            return {}
        kinds = self._kinds_now
        if kinds is None:  # (rebuilt only after a node changed state)
            asleep = self._asleep
            powered = self._on & core.cluster.up[: len(asleep)]
            specs = self._specs
            kinds = self._kinds_now = [
                NodeKind(
                    pool,
                    capacity,
                    tuple(specs[rows[asleep[rows]]].tolist()),
                    tuple(specs[rows[powered[rows]]].tolist()),
                )
                for (pool, capacity), rows in self._kinds
            ]
        return waiting_demand(kinds, jobs)

    def _control(self, now: float) -> None:
        core = self._core
        assert core is not None
        waiting = self.waiting(now)
        forecasts: dict[str, float | None] = dict.fromkeys(self.pool_names)
        keeps: dict[str, float | None] = dict.fromkeys(self.pool_names)
        rises: dict[str, float | None] = dict.fromkeys(self.pool_names)
        rise_keeps: dict[str, float | None] = dict.fromkeys(self.pool_names)
        surges: dict[str, float | None] = dict.fromkeys(self.pool_names)
        room = dict.fromkeys(self.pool_names, 0.0)
        if self.forecaster is not None or self.riser is not None or self.surger is not None:
            running: Mapping[str, float] = self._busy_by_pool()
            if self.policy == "surge-room":  # the work in node-equivalents, and the free room
                powered = np.array([s is PowerState.ON for s in self.state])
                shares = node_shares(self.cpu_used, self.gpu_used, self.cpu_cap, self.gpu_cap)
                running, room = work_and_room(shares, powered, self.pool_rows)
            needed = demand_signal(
                running, {p: d.queued_nodes + d.held_nodes for p, d in waiting.items()}
            )
            if self.forecaster is not None:
                self.forecaster.observe(now, needed)
                for pool in self.pool_names:
                    forecasts[pool] = self.forecaster.upper(pool, now, self.lookahead_s)
                    keeps[pool] = self.forecaster.upper(pool, now, self.setup.keep_lookahead_s)
            if self.riser is not None:  # arrivals over the wake look-ahead and SuspendTime
                self.riser.observe(now, needed)
                keep_s = self.setup.config.idle_threshold_s
                for pool in self.pool_names:
                    if self.setup.rise_margin is not None:
                        rises[pool] = self.riser.upper(
                            pool, now, self.lookahead_s, self.setup.rise_margin
                        )
                    if self.setup.rise_keep_margin is not None:
                        rise_keeps[pool] = self.riser.upper(
                            pool, now, keep_s, self.setup.rise_keep_margin
                        )
            if self.surger is not None:  # the largest recent rise over the wake look-ahead
                self.surger.observe(now, needed)
                for pool in self.pool_names:
                    surges[pool] = self.surger.upper(pool, now)
        nothing = PoolDemand()
        demand = {}
        for p in self.pool_names:
            wait = waiting.get(p, nothing)
            demand[p] = PoolDemand(
                wait.queued_nodes,
                forecasts[p],
                keeps[p],
                rises[p],
                rise_keeps[p],
                surges[p],
                held_nodes=wait.held_nodes,
                room_nodes=room[p],
                wake_first=wait.wake_first,
                unfit_powered=wait.unfit_powered,
            )
        for row in self._stale:  # the other rows' views are still current
            self._view(row)
        self._stale.clear()
        views = [v for v in self._views if v is not None]
        assert len(views) == len(self.names), "a node view was dropped without being rebuilt"
        plan = plan_power(self.policy, now, views, demand, self.setup.config, self.history)
        self.history = plan.history
        for name in plan.failed:
            row = self.index[name]
            self._set_state(row, PowerState.FAILED, now)
            self.failed.append(name)
            core.handle(NodeStateChanged(name, NodeState.DOWN, "resume timed out"), now)
        for name in plan.suspend:
            row = self.index[name]
            self._set_state(row, PowerState.SUSPENDING, now)
            core.handle(NodeStateChanged(name, NodeState.SUSPENDED, "power saving"), now)
            self._push(now + self.models[row].suspend_s, row, "suspended")
            self.suspends += 1
        for name in plan.resume:
            row = self.index[name]
            self._set_state(row, PowerState.RESUMING, now)
            self.resumes += 1
            rate = self.setup.wake_failure_rate
            if rate > 0 and self._rng.random() < rate:
                continue  # never comes up: the resume timeout will mark it failed
            self._push(now + self.models[row].wake_s, row, "up")

    def _push(self, when: float, row: int, to: str) -> None:
        self._seq += 1
        heapq.heappush(self._transitions, (when, self._seq, row, to))
