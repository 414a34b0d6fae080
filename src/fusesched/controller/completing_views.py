"""What users see of Slurm's COMPLETING (controller/completing.py): a job whose ended (or
requeued) run still holds its booking on nodes where its tasks are being killed is shown
``COMPLETING`` (squeue's ``CG``, ``fusesched show``), and a node on which such bookings are
all that is booked is shown ``comp`` by sinfo.

Shown, never stored: the job's stored state stays its end's (sacct, accounting, ``wait``
read it), and the API's :class:`~fusesched.api.job_schemas.JobView` carries the fact beside it
(``completing``), from the core's holds of this moment. A job that runs again (a requeued
job started elsewhere) is shown running, as it is. A restarted controller's core holds
nothing of the jobs that ended before it: a node where their tasks still die is kept
``DRAINING`` instead (controller/adoption.py), and shown so.

Each function takes the controller's lock (none when nothing is held: the common case). A
listing filters and flags its jobs from one :func:`jobs` (``with_completing``'s ``shown``):
a hold that ends between the store's query and the flags cannot list a job for
``completing=true`` that its view says is not completing.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from fusesched.api.job_schemas import JobView
from fusesched.core.completing import held_only
from fusesched.model.phases import JobPhase

if TYPE_CHECKING:
    from fusesched.controller.service import Controller


def jobs(ctl: Controller) -> frozenset[str]:
    """The jobs shown ``COMPLETING`` now: a run of theirs holds its booking on some node,
    and they do not run (again)."""
    if not ctl.core.completing:  # (read without the lock: a dict's truth is one step)
        return frozenset()
    with ctl.lock:
        core = ctl.core
        return frozenset(
            job_id
            for job_id in core.completing
            if (rec := core.jobs.get(job_id)) is None or rec.phase is not JobPhase.RUNNING
        )


def with_completing(
    ctl: Controller, views: Sequence[JobView], shown: frozenset[str] | None = None
) -> list[JobView]:
    """``views`` with ``completing`` set on the jobs shown ``COMPLETING``: those of ``shown``
    (what :func:`jobs` said when the views were looked up), else those of now."""
    if shown is None:
        shown = jobs(ctl)
    if not shown:
        return list(views)
    return [
        view.model_copy(update={"completing": True}) if view.id in shown else view for view in views
    ]


def nodes(ctl: Controller) -> frozenset[str]:
    """The nodes on which what ended runs hold is all that is booked (sinfo's ``comp``)."""
    if not ctl.core.completing:
        return frozenset()
    with ctl.lock:
        names = ctl.core.cluster.names
        return frozenset(names[row] for row in held_only(ctl.core))
