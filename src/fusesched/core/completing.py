"""Completing runs (Slurm's COMPLETING): a run that ended while processes of it still live
on some of its nodes (a job step's task the shell kills after a grace, one that ignores
SIGTERM) keeps what it booked on those nodes, resources and devices, until the shell says
they are gone there (:class:`~fusesched.model.events.CompletingEnded`): no new job is
placed on the CPUs, memory or GPUs its processes may still use. The rest of its booking is
free at its end, as is its quota and its licenses; the job itself has ended (its phase, exit
and end time are those of its end).

The shell names those nodes in the run's :class:`~fusesched.model.events.JobExited`
(``completing``). The simulator's runs never outlive their jobs: nothing is held there.

Pure, like the rest of the core.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from fusesched.core.cluster import IntArray
from fusesched.core.devices import DeviceAssignment, TaskDevices
from fusesched.model.events import CompletingEnded, Decision

if TYPE_CHECKING:
    from fusesched.core.placement import Allocation
    from fusesched.core.scheduler import SchedulerCore


@dataclass(slots=True)
class Held:
    """What ended runs of a job still hold on one node: their booking's resources there (a
    row over the cluster's columns as they were at the end), their tasks' devices there, and
    since when."""

    amounts: IntArray
    since: float
    devices: list[TaskDevices] = field(default_factory=list)


#: Per job, per node row, what its ended runs still hold.
Holds = dict[str, dict[int, Held]]


def hold(
    core: SchedulerCore, job_id: str, alloc: Allocation, nodes: Collection[str], now: float
) -> None:
    """Give back the run's booking ``alloc`` but on ``nodes``, where it stays held (a node
    the booking does not include holds nothing)."""
    index = core.cluster.index
    rows = {index[name] for name in nodes if name in index}
    entries = alloc.nodes
    kept = np.isin(entries, list(rows))
    amounts = alloc.amounts
    if not kept.all():
        core.cluster.give(entries[~kept], amounts[~kept], unique=alloc.unique)
    held = core.completing.setdefault(job_id, {})
    for k in np.flatnonzero(kept).tolist():
        _add(held, int(entries[k]), amounts[k], now)
    for devices in alloc.devices:
        if devices is None:
            continue
        free = tuple(task for task in devices.tasks if task.row not in rows)
        if free:
            core.devices.release(DeviceAssignment(free))
        for task in devices.tasks:
            if task.row in rows:
                _add(held, task.row, np.zeros_like(amounts[0]), now).devices.append(task)
    if not held:
        del core.completing[job_id]


def _add(held: dict[int, Held], row: int, amounts: IntArray, now: float) -> Held:
    entry = held.get(row)
    if entry is None:
        entry = held[row] = Held(amounts.copy(), now)
    else:  # (another run of the job, or another of its task groups there)
        entry.amounts = _padded(entry.amounts, len(amounts)) + amounts
        entry.since = now  # (a later run's processes get their whole time-out too)
    return entry


def ended(core: SchedulerCore, event: CompletingEnded) -> list[Decision]:
    """The job's ended runs hold nothing more on ``event.nodes`` (nodes where they hold
    nothing are left alone: the shell may say so twice)."""
    held = core.completing.get(event.job_id)
    if held is None:
        return []
    cluster = core.cluster
    for name in event.nodes:
        row = cluster.index.get(name)
        entry = held.pop(row, None) if row is not None else None
        if entry is None:
            continue
        amounts = _padded(entry.amounts, len(cluster.columns))  # (columns added since)
        cluster.give(np.array([row], dtype=np.int64), amounts[None, :], unique=True)
        if entry.devices:
            core.devices.release(DeviceAssignment(tuple(entry.devices)))
        core._changed = True
    if not held:
        del core.completing[event.job_id]
        if core.tenants is not None:  # (a preemptor waits for its victims' room)
            core.tenants.victim_gone(event.job_id)
    return []


def _padded(amounts: IntArray, width: int) -> IntArray:
    extra = width - len(amounts)
    return np.pad(amounts, (0, extra)) if extra > 0 else amounts


# ---------------------------------------------------------------------- estimates
# What ended runs hold is gone within a kill's grace: a waiting job's reservation (backfill)
# counts it free now, so that nothing backfilled takes the room a blocked head waits for.


def held_rows(core: SchedulerCore) -> tuple[IntArray, IntArray]:
    """The node rows ended runs hold something on (a row may repeat) and what, as rows over
    the cluster's columns."""
    width = len(core.cluster.columns)
    rows = [row for held in core.completing.values() for row in held]
    amounts = [
        _padded(e.amounts, width) for held in core.completing.values() for e in held.values()
    ]
    return np.array(rows, dtype=np.int64), np.array(amounts, dtype=np.int64).reshape(-1, width)


def soon(core: SchedulerCore) -> tuple[IntArray, IntArray]:
    """The free matrix once what ended runs hold is free (a copy), and its sums over the
    nodes up."""
    cluster = core.cluster
    free = cluster.free.copy()
    rows, amounts = held_rows(core)
    np.add.at(free, rows, amounts)
    total: IntArray = free[cluster.up].sum(axis=0)
    return free, total


def held_sum(core: SchedulerCore, col: int) -> int:
    """How much of column ``col`` ended runs hold on the nodes up."""
    rows, amounts = held_rows(core)
    return int(amounts[core.cluster.up[rows], col].sum())


# ---------------------------------------------------------------------- views


def held_only(core: SchedulerCore) -> list[int]:
    """The node rows where what ended runs hold is all that is booked: no running job books
    anything there (Slurm's ``comp`` node, against ``mix`` or ``alloc``)."""
    cluster = core.cluster
    width = len(cluster.columns)
    held: dict[int, IntArray] = {}
    for rows in core.completing.values():
        for row, entry in rows.items():
            amounts = _padded(entry.amounts, width)
            held[row] = held[row] + amounts if row in held else amounts
    return [
        row
        for row, amounts in sorted(held.items())
        if (cluster.capacity[row] - cluster.free[row] <= amounts).all()
    ]
