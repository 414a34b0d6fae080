"""The controller's side of job steps (``POST /v1/jobs/{id}/steps``): a step is given its
share of the job's slots and its tasks are started, in one go under the lock, or it is
refused (:mod:`fusesched.controller.job_steps` decides, without I/O).

Starting the tasks with the share, not in later calls, leaves nothing half made: a step
exists exactly while a task of it lives, whatever becomes of its ``srun``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from fusesched.agent.step_het import het_hostfile_name
from fusesched.agent.step_plan import read_hostfile
from fusesched.controller import agents
from fusesched.controller.job_steps import (
    StepNeverFits,
    StepsBusy,
    StepShare,
    check_fits,
    component_share,
    next_step_id,
    running_shares,
    share_env,
    share_of,
)
from fusesched.controller.launchenv import HOSTFILE_NAME

if TYPE_CHECKING:
    from fusesched.controller.records import LiveJob
    from fusesched.controller.service import Controller


def create_step(
    ctl: Controller,
    job_id: str,
    slots: Mapping[str, int],
    overlap: bool,
    launches: Sequence[tuple[str, list[str], Mapping[str, str]]],
    het: Mapping[int, Mapping[str, int]] | None = None,
) -> tuple[int, list[str]]:
    """Give a step of ``job_id`` ``slots`` (tasks per node) and start its ``launches``
    (node, argv, the task's own variables) as remote tasks of the job; (step id, task ids
    in order). A heterogeneous job's step gives its share of each component it runs on
    (``het``: component → slots per node, whose sum is ``slots``; none: all of component
    0's), each counted against that component's slots.

    :class:`UnknownJobError` when the job does not run, :class:`StepNeverFits` (and
    :class:`SubmitError` for a launch off the step's nodes) when it can never start,
    :class:`StepsBusy` when it must wait for running steps to end (or for the job's
    adoption after a controller restart, when its tasks' steps are not all known yet)."""
    with ctl.work:
        live = agents.running_job(ctl, job_id)
        if live.adopting:
            raise StepsBusy(
                "Requested nodes are busy: the job's running tasks are being adopted after "
                "a controller restart"
            )
        for node, _, _ in launches:
            if node not in slots:
                raise StepNeverFits(f"a task of the step on {node}, which the step has no slot on")
            agents.check_remote_node(ctl, live, node)
        parts = het_parts(live, slots, het)
        remote = [t for t in live.tasks.values() if t.remote]
        running = running_shares(t.launch.env for t in remote if t.state != "exited")
        if not parts:
            check_fits(job_slots(live), slots, overlap, running)
        for group, asked in parts:
            own = [component_share(s, group) for s in running]
            what = f"component {group} of the job"
            check_fits(component_slots(live, group), dict(asked), overlap, own, what)
        shares = (share_of(t.launch.env) for t in remote)
        step_id = next_step_id(s.step_id for s in shares if s is not None)
        marks = share_env(StepShare(step_id, tuple(slots.items()), overlap, parts))
        task_ids = [
            agents.launch_remote(ctl, live, node, argv, marks, env) for node, argv, env in launches
        ]
        ctl.work.notify_all()
    return step_id, task_ids


def job_slots(live: LiveJob, name: str = HOSTFILE_NAME) -> dict[str, int] | None:
    """The job's tasks per node, as its hostfile (``name``: a component's) lists them (what
    ``srun`` places steps in); None when no launch of it that this controller holds carries
    one."""
    for task in live.tasks.values():
        text = task.launch.files.get(name)
        if not task.remote and text is not None:
            return dict(read_hostfile(text))
    return None


def component_slots(live: LiveJob, group: int) -> dict[str, int] | None:
    """A heterogeneous job's component ``group``'s tasks per node (its own hostfile)."""
    return job_slots(live, het_hostfile_name(group))


def het_parts(
    live: LiveJob, slots: Mapping[str, int], het: Mapping[int, Mapping[str, int]] | None
) -> tuple[tuple[int, tuple[tuple[str, int], ...]], ...]:
    """A step's share of each component of ``live`` (empty for a job that is not
    heterogeneous); :class:`StepNeverFits` for a component the job does not have."""
    size = len(live.request.groups) if live.request.hetjob else 1
    if het is None:
        het = {0: slots}
    for group in het:
        if group >= size:
            why = (
                f"has no component {group} (its components: 0-{size - 1})"
                if size > 1
                else "is not a heterogeneous job (its one component is 0)"
            )
            raise StepNeverFits(f"--het-group={group}: job {live.id} {why}")
    if size == 1:
        return ()
    return tuple((group, tuple(own.items())) for group, own in sorted(het.items()))
