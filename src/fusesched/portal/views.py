"""What the operator pages show, read from the live controller and the store.

* :func:`cluster_view`: every node with its state (and why), power state, CPU, memory, GPU and
  MIG occupancy, and which job holds each device (the heat map);
* the Queues page: :func:`fusesched.api.queues.queue_view` (as ``GET /v1/queues``);
* :func:`history_view`: utilisation, wait time and estimated energy per time bucket.

Reads only: nothing here changes the controller's state.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any, Final

from sqlalchemy import func, select

from fusesched.api.access import AUDIT
from fusesched.controller import snapshots
from fusesched.model.node import LABEL_POOL, LOCAL_POOL
from fusesched.model.resources import CPU, GPU, MEMORY, Resources, format_quantity
from fusesched.portal.schemas import (
    DeviceSlot,
    HistoryPoint,
    HistoryView,
    NodeOccupancy,
    PoolSummary,
    ResourceUse,
)
from fusesched.store.schema import events, jobs
from fusesched.store.usage import usage_report

if TYPE_CHECKING:
    from fusesched.controller.service import Controller
    from fusesched.store import Store

MIG_PREFIX: Final = "nvidia.com/mig-"
#: Resources every node row shows, in this order (others follow by name).
SHOWN_FIRST: Final = (CPU, MEMORY, GPU)
#: At most this many job rows are read for the wait-time chart.
MAX_WAIT_ROWS: Final = 200_000
#: The events :class:`NodeReasons` reads: state changes, drains and their audit rows.
NODE_EVENTS: Final = ("NodeStateChanged", "NodeDrained", "NodeUndrained", AUDIT)


# --------------------------------------------------------------------------- node reasons


class NodeReasons:
    """The latest state change of each node and why, and when (and by whom) its operator's
    drain was set, from the event log, read incrementally (each call reads only the events
    added since the last one)."""

    def __init__(self) -> None:
        self.last_id = 0
        self.latest: dict[str, tuple[str, str, float]] = {}  # node -> (state, why, time)
        self.drained: dict[str, tuple[float, str | None]] = {}  # node -> (time, by whom)
        self.lock = threading.Lock()

    def refresh(self, store: Store) -> Mapping[str, tuple[str, str, float]]:
        with self.lock:
            with store._read() as conn:  # the store has no public "events since" read
                # up to the newest event of any kind, and the next read from there: a read
                # that went on from the newest node event would scan every job event since
                # it again, at each call
                newest = conn.execute(select(func.max(events.c.id))).scalar()
                if newest is None or int(newest) <= self.last_id:
                    return dict(self.latest)
                stmt = (
                    select(events.c.time, events.c.node, events.c.kind, events.c.data)
                    .where(
                        events.c.id > self.last_id,
                        events.c.id <= newest,
                        events.c.kind.in_(NODE_EVENTS),
                        events.c.node.is_not(None),  # (not the audit rows of jobs)
                    )
                    .order_by(events.c.id)
                )
                for at, node, kind, data in conn.execute(stmt):
                    if node:
                        info = data if isinstance(data, dict) else {}
                        self._note(str(node), str(kind), info, float(at))
                self.last_id = int(newest)
            return dict(self.latest)

    def _note(self, node: str, kind: str, info: Mapping[str, Any], at: float) -> None:
        if kind == "NodeStateChanged":
            self.latest[node] = (str(info.get("state", "")), str(info.get("why", "")), at)
        elif kind == "NodeDrained":
            self.drained[node] = (at, None)
        elif kind == "NodeUndrained":
            self.drained.pop(node, None)
        elif info.get("action") == "node-drain" and node in self.drained:
            # (the audit row follows its NodeDrained: it names who, with authentication on)
            self.drained[node] = (self.drained[node][0], str(info.get("by") or "") or None)

    def drains(self) -> dict[str, tuple[float, str | None]]:
        """Each drained node's drain: when it was set and who set it (None: unknown)."""
        with self.lock:
            return dict(self.drained)


# --------------------------------------------------------------------------- nodes


def _use(name: str, capacity: int, free: int) -> ResourceUse:
    used = max(0, capacity - max(0, free))
    return ResourceUse(
        name=name,
        capacity=format_quantity(name, capacity),
        used=format_quantity(name, used),
        fraction=round(used / capacity, 4) if capacity > 0 else 0.0,
    )


def _order(names: Iterable[str]) -> list[str]:
    first = [n for n in SHOWN_FIRST if n in names]
    return first + sorted(n for n in names if n not in SHOWN_FIRST)


def cluster_view(ctl: Controller, reasons: Mapping[str, tuple[str, str, float]]) -> dict[str, Any]:
    """Nodes with their occupancy, devices and states; totals per pool."""
    snapshot = snapshots.nodes(ctl)
    with ctl.lock:
        holders: dict[tuple[str, str], str] = {}  # (node, device key) -> job id
        for job_id, task in ctl.tasks.values():
            if task.state == "exited":
                continue
            for index in task.grant.gpu_indices:
                holders[(task.node, f"gpu:{index}")] = job_id
            for uuid in task.grant.gpu_uuids:
                holders[(task.node, uuid)] = job_id
        capacities = {name: node.spec.capacity for name, node in ctl.nodes.items()}
        drains = {name: node.drain for name, node in ctl.nodes.items()}
        power = ctl.power
        power_states = {name: power.state_of(name).value for name in ctl.nodes} if power else {}
    nodes: list[NodeOccupancy] = []
    pools: dict[str, dict[str, list[int]]] = {}
    pool_nodes: dict[str, int] = {}
    for inventory, state, _seen, free in snapshot:
        capacity = capacities.get(inventory.name) or Resources.parse(inventory.resources)
        pool = inventory.labels.get(LABEL_POOL, LOCAL_POOL)
        use = [_use(n, capacity.get(n), free.get(n)) for n in _order(capacity)]
        devices = []
        for d in inventory.devices:
            key = d.uuid if d.kind.startswith(MIG_PREFIX) else f"gpu:{d.index}"
            devices.append(
                DeviceSlot(
                    index=d.index,
                    kind=d.kind,
                    model=d.model,
                    mig_profile=d.mig_profile,
                    uuid=d.uuid,
                    job_id=holders.get((inventory.name, key)),
                )
            )
        state_change = reasons.get(inventory.name)
        why = state_change[1] if state_change is not None and state.value != "up" else ""
        since = state_change[2] if state_change is not None else None
        nodes.append(
            NodeOccupancy(
                name=inventory.name,
                pool=pool,
                state=state.value,
                reason=why,
                since=since,
                power=power_states.get(inventory.name, "on"),
                drain_reason=drains.get(inventory.name),
                drainable=inventory.name in drains,
                resources=use,
                devices=devices,
                labels=dict(inventory.labels),
            )
        )
        pool_nodes[pool] = pool_nodes.get(pool, 0) + 1
        totals = pools.setdefault(pool, {})
        for name in capacity:
            entry = totals.setdefault(name, [0, 0])
            entry[0] += capacity.get(name)
            entry[1] += max(0, capacity.get(name) - max(0, free.get(name)))
    summaries = [
        PoolSummary(
            name=pool,
            nodes=pool_nodes[pool],
            resources=[
                ResourceUse(
                    name=n,
                    capacity=format_quantity(n, totals[n][0]),
                    used=format_quantity(n, totals[n][1]),
                    fraction=round(totals[n][1] / totals[n][0], 4) if totals[n][0] > 0 else 0.0,
                )
                for n in _order(totals)
            ],
        )
        for pool, totals in sorted(pools.items())
    ]
    nodes.sort(key=lambda n: (n.pool, n.name))
    return {
        "nodes": nodes,
        "pools": summaries,
        "power_saving": power is not None,
        "unhealthy": [n for n in nodes if n.state != "up" or n.power != "on"],
    }


# --------------------------------------------------------------------------- history


def history_view(ctl: Controller, start: float, end: float, buckets: int) -> HistoryView:
    """Utilisation (allocated over current capacity), mean wait of the jobs that started and
    estimated energy, in ``buckets`` equal steps of ``[start, end]``."""
    store = ctl.persist.store
    cores = gpus = 0.0
    for inventory, _state, _seen, _free in snapshots.nodes(ctl):
        node = ctl.nodes.get(inventory.name)
        capacity = node.spec.capacity if node is not None else Resources.parse(inventory.resources)
        cores += capacity.get(CPU) / 1000.0
        gpus += capacity.get(GPU)
    step = (end - start) / buckets
    waits: list[list[float]] = [[] for _ in range(buckets)]
    stmt = (
        select(jobs.c.submit_time, jobs.c.start_time)
        .where(jobs.c.start_time.is_not(None), jobs.c.start_time >= start, jobs.c.start_time < end)
        .limit(MAX_WAIT_ROWS)
    )
    with store._read() as conn:  # the store has no public read of start times by window
        for submit, started in conn.execute(stmt):
            k = min(buckets - 1, int((float(started) - start) / step))
            waits[k].append(max(0.0, float(started) - float(submit)))
    points = []
    for k in range(buckets):
        lo, hi = start + k * step, start + (k + 1) * step
        report = usage_report(store, lo, hi, (), now=min(end, ctl.clock()))
        hours = step / 3600.0
        total = report.total
        points.append(
            HistoryPoint(
                start=lo,
                end=hi,
                cpu_util=round(total.cpu_hours / (cores * hours), 4) if cores > 0 else 0.0,
                gpu_util=round(total.gpu_hours_total / (gpus * hours), 4) if gpus > 0 else 0.0,
                wait_s=round(sum(waits[k]) / len(waits[k]), 3) if waits[k] else None,
                started=len(waits[k]),
                energy_kwh=round(total.energy_kwh_est, 6),
            )
        )
    return HistoryView(start=start, end=end, step_s=step, cpus=cores, gpus=gpus, points=points)
