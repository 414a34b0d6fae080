"""Node events in the core: a node registers (:class:`~fusesched.model.events.NodeAdded`),
changes state (:class:`~fusesched.model.events.NodeStateChanged`) or reports the datasets it
caches (:class:`~fusesched.model.events.NodeDatasets`).

Functions that take the core, as :mod:`fusesched.core.exits` and :mod:`fusesched.core.intake`.
Pure, like the rest of the core.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

import numpy as np

from fusesched.core.cluster import IntArray
from fusesched.core.device_specs import (
    Device,
    devices_from_capacity,
    fill_models,
    is_device_kind,
    with_device_capacity,
)
from fusesched.model.events import NodeAdded, NodeDatasets, NodeStateChanged

if TYPE_CHECKING:
    from fusesched.core.scheduler import SchedulerCore


def added(core: SchedulerCore, event: NodeAdded) -> None:
    """Register a node; its accelerators go into the device ledger one by one and count in
    the aggregate columns as :func:`with_device_capacity` says."""
    spec = event.node
    devices: list[Device] = []
    if spec.devices:
        devices = fill_models(spec.devices, spec.labels)
    elif any(is_device_kind(name) for name in spec.capacity):
        devices = devices_from_capacity(spec.capacity, spec.labels)
    if devices:
        capacity = with_device_capacity(spec.capacity, devices)
        spec = replace(spec, capacity=capacity, devices=tuple(devices))
    core.cluster.add_node(spec, event.state)
    if devices:
        core.devices.add_node(core.cluster.index[spec.name], devices)
    _widen(core)
    changed(core)


def state_changed(core: SchedulerCore, event: NodeStateChanged) -> None:
    if event.node not in core.cluster.index:
        raise KeyError(f"unknown node {event.node!r}")
    core.cluster.set_state(event.node, event.state)
    changed(core)


def datasets(core: SchedulerCore, event: NodeDatasets) -> None:
    row = core.cluster.index.get(event.node)
    if row is None:
        raise KeyError(f"unknown node {event.node!r}")
    if core.data.report(row, event.datasets):
        core._changed = True  # a job may now be placed with its data


def changed(core: SchedulerCore) -> None:
    """The cluster changed: what was cached of it is stale."""
    core._changed = True
    core._capacity = None
    core.shapes.clear()
    core._filters.clear()


def _widen(core: SchedulerCore) -> None:
    """A node brought a new resource column: pad every array that has one row per column."""
    width = len(core.cluster.columns)
    core.queue.widen(width)
    core.running.widen(width)

    def pad(array: IntArray) -> IntArray:
        extra = width - array.shape[-1]
        if extra <= 0:
            return array
        return np.pad(array, [(0, 0)] * (array.ndim - 1) + [(0, extra)])

    seen: set[int] = set()
    for rec in core.jobs.values():
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
