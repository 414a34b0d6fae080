"""Changing a waiting job's priority, QoS or time limit (Slurm's ``scontrol update``).

The core re-queues the job with its new place (:class:`JobUpdateRequested`); the controller's
copy and the stored request change too, so the job starts, and is recovered after a restart,
with the new values. Only a job the scheduler has queued can be changed: a running or ended
one is an :class:`UpdateRefused` (a 409), as is one recovered after a restart and still
waiting for its nodes (try again once it is queued). A job submitted since the last cycle is
changed right after the core takes it.

Every function here takes the controller's lock itself.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Any

from fusesched.controller.holds import HoldRefused, is_waiting, member_targets, recovered
from fusesched.model.events import JobUpdateRequested
from fusesched.model.job import JobSpec, QoS
from fusesched.model.phases import JobPhase

if TYPE_CHECKING:
    from fusesched.controller.service import Controller


class UpdateRefused(HoldRefused):
    """A change that cannot be made (the job runs, ended, or is not queued yet); a 409."""


class UpdateForbidden(PermissionError):
    """A user (not an admin) asked to raise a priority or a QoS, or to lengthen a time limit:
    as in Slurm, users may only lower them (a 403)."""


def update(
    ctl: Controller,
    job_id: str,
    priority: int | None = None,
    qos: QoS | None = None,
    walltime_s: float | None = None,
    only_lower: bool = False,
) -> list[str]:
    """Change ``job_id`` (an array's waiting members); the ids changed. ``only_lower``: the
    caller is a user, who may only lower the priority and the QoS and shorten the time
    limit (:class:`UpdateForbidden`)."""
    changes: dict[str, Any] = {
        k: v
        for k, v in (("priority", priority), ("qos", qos), ("walltime_s", walltime_s))
        if v is not None
    }
    if not changes:
        raise UpdateRefused("nothing to change: give a priority, a QoS or a time limit")
    now = ctl.clock()
    with ctl.work:
        waiting = lambda t: is_waiting(ctl, t)  # noqa: E731
        targets = member_targets(ctl, job_id, waiting, "waiting", "change")
        for target in targets:  # every member checked before any is changed
            _check(ctl, target, changes, only_lower)
        for target in targets:
            live = ctl.jobs[target]
            event = JobUpdateRequested(target, priority, qos, walltime_s)
            if target in ctl.core.jobs:
                ctl.core.handle(event, now)
            else:  # submitted since the last cycle: changed right after the core takes it
                ctl.events.append(event)
            live.spec = replace(live.spec, **changes)
            live.request = live.request.model_copy(update=changes)
            stored = live.request.model_dump(mode="json", exclude_none=True)
            ctl.persist.job_updated(target, live.spec.priority, stored, changes, now)
        ctl.persist.flush()
    ctl.wake()
    return targets


def _check(ctl: Controller, job_id: str, changes: dict[str, Any], only_lower: bool) -> None:
    """Refuse a change of ``job_id`` before anything is changed: a user raising something
    (:class:`UpdateForbidden`), a job not waiting or recovered and not queued yet, a QoS or a
    limit the tenancy configuration refuses (a refused job would be cancelled at the next
    restart, when it is submitted again)."""
    live = ctl.jobs[job_id]
    if only_lower:
        _only_lower(
            job_id,
            live.spec,
            changes.get("priority"),
            changes.get("qos"),
            changes.get("walltime_s"),
        )
    rec = ctl.core.jobs.get(job_id)
    if rec is not None and rec.phase not in (JobPhase.QUEUED, JobPhase.PENDING):
        raise UpdateRefused(f"job {job_id} is {rec.phase}: only a waiting job can be changed")
    if rec is None and recovered(ctl, job_id, live.spec.array_parent):
        raise UpdateRefused(
            f"job {job_id} waits for its nodes after a restart and is not in the "
            "scheduler's queue yet: try again once it is"
        )
    tenants = ctl.core.tenants
    refused = tenants.refuse(replace(live.spec, **changes)) if tenants is not None else ""
    if refused:
        raise UpdateRefused(f"job {job_id}: {refused}")


def _only_lower(
    job_id: str, spec: JobSpec, priority: int | None, qos: QoS | None, walltime_s: float | None
) -> None:
    if priority is not None and priority > spec.priority:
        raise UpdateForbidden(
            f"job {job_id}: only an admin may raise a priority ({spec.priority} → {priority})"
        )
    if qos is not None and qos.rank > spec.qos.rank:
        raise UpdateForbidden(f"job {job_id}: only an admin may raise a QoS ({spec.qos} → {qos})")
    if walltime_s is not None and spec.walltime_s is not None and walltime_s > spec.walltime_s:
        raise UpdateForbidden(
            f"job {job_id}: only an admin may lengthen a time limit "
            f"({spec.walltime_s:g} s → {walltime_s:g} s)"
        )
