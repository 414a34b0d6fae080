"""Adoption: a restarted controller hands the core the jobs its predecessor had running.

The core books each such job where its tasks run (their nodes' resources, the exact devices
they hold; a task slot it holds where nothing was launched, the GPUs it held there when
they are free, else any free devices) and marks it running since its start time, without a
launch decision. A job whose tasks no longer fit their nodes (the node came back smaller,
say) is not adopted: the core cancels it and asks the shell to stop its tasks.
"""

from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING

import numpy as np

from fusesched.core.device_specs import DeviceDemand
from fusesched.core.devices import DeviceAssignment, DevicesUnavailable, TaskDevices
from fusesched.core.placement import Statement
from fusesched.model.events import Decision, JobAdopted, StopJob
from fusesched.model.phases import JobPhase

if TYPE_CHECKING:
    from fusesched.core.records import JobRecord
    from fusesched.core.scheduler import SchedulerCore


class NotAdoptable(ValueError):
    """The job's tasks cannot be booked where they run."""


def adopt(core: SchedulerCore, event: JobAdopted, now: float) -> list[Decision]:
    """Book ``event.job`` as running on its tasks' nodes (see the module docstring)."""
    spec = event.job
    rec = core.register_job(spec, now)
    rec.move(JobPhase.QUEUED, now, "recovered after a controller restart")
    try:
        _book(core, rec, event)
    except NotAdoptable as exc:
        reason = f"could not be adopted after a controller restart: {exc}"
        rec.move(JobPhase.CANCELLED, now, reason)
        return [StopJob(spec.id, reason), *core._settle_dependents(rec, now)]
    if core.arrays.tallies and spec.array_parent in core.arrays.tallies:
        core._started.append(rec)  # its array's ``after`` dependents count it as started
    return []


def _book(core: SchedulerCore, rec: JobRecord, event: JobAdopted) -> None:
    if rec.groups is None or rec.never_fits:
        raise NotAdoptable(rec.never_fits or "it asks for a resource no node has")
    cluster = core.cluster
    shapes = {g.name: g for g in rec.groups}
    by_group: dict[str, list[int]] = {}
    for task in event.tasks:
        row = cluster.index.get(task.node)
        if row is None:
            raise NotAdoptable(f"node {task.node!r} is unknown")
        if task.group not in shapes:
            raise NotAdoptable(f"task group {task.group!r} is not in the job")
        by_group.setdefault(task.group, []).append(row)
    statement = Statement(cluster)
    devices: list[DeviceAssignment | None] = []
    claimed: list[DeviceAssignment] = []
    try:
        for name, node_rows in by_group.items():
            group = shapes[name]
            counts = Counter(node_rows)
            rows = np.fromiter(counts, np.int64)
            tasks = np.fromiter(counts.values(), np.int64)
            need = tasks[:, None] * group.per_task[None, :]
            if np.any(cluster.free[rows] < need):
                raise NotAdoptable(f"its {name!r} tasks no longer fit their nodes")
            statement.allocate(group, rows, tasks)
            if group.demand is None:
                devices.append(None)
                continue
            taken = []
            try:  # (launched tasks first: the slots held only take what those leave)
                for t in sorted(event.tasks, key=lambda t: not t.launched):
                    if t.group != name:
                        continue
                    row = cluster.index[t.node]
                    if not t.launched:
                        taken.append(_held_slot(core, row, group.demand, t.gpu_indices))
                        continue
                    taken.append(core.devices.claim(row, group.demand, t.gpu_indices, t.gpu_uuids))
            finally:
                held = DeviceAssignment(tuple(taken))
                claimed.append(held)
            devices.append(held)
    except (NotAdoptable, DevicesUnavailable) as exc:
        statement.discard()
        for held in claimed:
            core.devices.release(held)
        raise NotAdoptable(str(exc)) from None
    alloc = statement.commit()
    alloc.devices = devices
    core.bind_adopted(rec, alloc, event.start_time)


def _held_slot(
    core: SchedulerCore, row: int, demand: DeviceDemand, gpus: tuple[int, ...]
) -> TaskDevices:
    """The devices of a task slot the job holds where nothing was launched: of ``gpus``
    (the job's there before the restart, which its steps' tasks may be using) when they
    are free, else any free."""
    if gpus:
        try:
            return core.devices.claim(row, demand, gpus, ())
        except DevicesUnavailable:
            pass
    return core.devices.assign(row, demand).tasks[0]
