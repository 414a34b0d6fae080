"""A job that is complete once one of its task groups is (a group's ``completes_job``;
Volcano's ``TaskCompleted → CompleteJob``): an MPI launcher, a chief whose parameter servers
never exit. When every task of such a group has exited 0 on fusesched's own agents (not in an
external cluster's pool), the job's other tasks are stopped and the job completes (exit 0)
with the reason ``task group <name> completed``: their exits are not its failure, and nothing
restarts it any more (it is being stopped, as a cancelled job is). A controller restarted
while the others are being stopped finds the group complete in the store and stops them again
(:func:`recovered`). Runs with the controller's lock held.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from fusesched.controller.metrics import group_of
from fusesched.store.records import JobState

if TYPE_CHECKING:
    from fusesched.controller.records import LiveJob, LiveTask
    from fusesched.controller.service import Controller
    from fusesched.store.records import TaskRow


def group_completed(ctl: Controller, live: LiveJob, task: LiveTask, now: float) -> None:
    """``task`` of ``live`` exited 0: when that completes a ``completes_job`` group, stop the
    rest of the job, which then completes."""
    if task.remote or task.pool is not None:
        return  # (mpirun's daemons; an external cluster's job, one task for all)
    if live.stopping is not None or live.first_failure is not None:
        return  # (a failure or a stop already decides how it ends)
    if live.requeue is not None or live.relaunch is not None:
        return  # (being restarted: an exit 0 on that stop is no completion)
    group = group_of(task.launch.task_id)
    spec = next((g for g in live.request.groups if g.name == group), None)
    if spec is None or not spec.completes_job:
        return
    mine = [t for t in live.tasks.values() if not t.remote and group_of(t.launch.task_id) == group]
    if not all(t.state == "exited" and t.exit_code == 0 for t in mine):
        return
    reason = _complete(live, group)
    ctl.persist.job_event(live.id, "JobGroupCompleted", f"{reason}: the job is complete", now)
    ctl.stop_tasks(live, reason)


def recovered(live: LiveJob, rows: Sequence[TaskRow]) -> None:
    """``live`` is adopted after a restart, ``rows`` its run's stored tasks: when those of a
    ``completes_job`` group all exited 0, no other having failed before, it was being stopped
    and completes as it would have (adoption sends the stop again)."""
    if live.pool is not None:
        return
    rows = [t for t in rows if ".remote." not in t.task_id]
    for spec in live.request.groups:
        mine = [t for t in rows if t.group == spec.name]
        done = all(t.state is JobState.COMPLETED and t.exit_code == 0 for t in mine)
        if not spec.completes_job or not mine or not done:
            continue
        at = max(t.end_time or 0.0 for t in mine)
        if not any(t.exit_code not in (None, 0) and (t.end_time or 0.0) < at for t in rows):
            _complete(live, spec.name)
        return


def _complete(live: LiveJob, group: str) -> str:
    reason = f"task group {group} completed"
    live.stopping = reason
    live.first_failure = (0, reason)  # how the run ends: exit 0, whatever the others' exits
    return reason
