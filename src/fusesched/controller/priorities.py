"""A job's multifactor priority asked for now (``GET /v1/jobs/{id}/priority``:
:meth:`Controller.priority <fusesched.controller.service.Controller.priority>`).

The core knows a job's priority once it is queued; a job submitted a moment ago is queued at
the next scheduling cycle (submissions share cycles), which is run at once for the question,
while a job recovered after a controller restart that still waits for its nodes has none yet.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from fusesched.controller.records import LiveJob, UnknownJobError
from fusesched.model.events import JobSubmitted
from fusesched.policies.priority import PriorityBreakdown

if TYPE_CHECKING:
    from fusesched.controller.service import Controller


def priority(ctl: Controller, job_id: str) -> PriorityBreakdown:
    """``job_id``'s priority now (:class:`UnknownJobError`, or ValueError when the
    controller runs without tenancy or the job is not queued yet)."""
    with ctl.work:
        live = ctl.jobs.get(job_id)
        if live is not None and job_id not in ctl.core.jobs:
            if not submitting(ctl, live):
                raise ValueError(
                    f"job {job_id} is not in the scheduler's queue yet (after a restart it "
                    "waits for its nodes to come back); it has a priority once it is queued"
                )
            # submitted just now: the core learns of it at the next cycle, run at once for this
            ctl.wake()
            ctl.cycle_waiters += 1
            try:
                ctl.work.wait_for(
                    lambda: job_id in ctl.core.jobs or ctl.stopped.is_set(), timeout=2.0
                )
            finally:
                ctl.cycle_waiters -= 1
        try:
            return ctl.core.priority(job_id, ctl.clock())
        except KeyError:
            raise UnknownJobError(job_id) from None
        except ValueError as exc:
            if ctl.core.tenants is None:  # say how to have one
                hint = "start the controller with --tenancy FILE (docs/TENANCY.md)"
                raise ValueError(f"{exc}; {hint}") from None
            raise


def submitting(ctl: Controller, live: LiveJob) -> bool:
    """Whether ``live``'s submission waits for the next cycle (not a job recovered after a
    restart that waits for its nodes); called with the lock held."""
    ids = {live.id, live.spec.array_parent}
    return any(isinstance(e, JobSubmitted) and e.job.id in ids for e in ctl.events)
