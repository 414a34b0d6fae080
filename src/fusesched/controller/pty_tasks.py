"""Which task of a job runs on a pseudo-terminal (``fusesched run --pty``; a step's, ``srun
--pty``), as the relay's routes ask it (:mod:`fusesched.api.pty_routes`), and the refusal of
such a launch by an agent too old to relay it (:func:`refuse_older`). The lookups take the
controller's lock."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from fusesched.api.wire import TaskReport, TaskState
from fusesched.controller import endings
from fusesched.controller.logs import job_of
from fusesched.controller.records import UnknownJobError

if TYPE_CHECKING:
    from fusesched.controller.records import LiveNode
    from fusesched.controller.service import Controller

log = logging.getLogger("fusesched.controller")

#: Why a pseudo-terminal task does not start on an agent older than the relay.
OLDER_AGENT = (
    "the agent of node {node} is too old for a pseudo-terminal (fusesched run --pty): "
    "upgrade it, or run the job without --pty"
)


class PtyRefused(ValueError):
    """The relay cannot serve this call; ``status`` is the HTTP answer (404 or 409)."""

    def __init__(self, status: int, why: str) -> None:
        super().__init__(why)
        self.status = status


def client_task(ctl: Controller, job_id: str) -> tuple[str, str]:
    """(task id, node) of ``job_id``'s pseudo-terminal task. :class:`UnknownJobError` for
    an unknown job; :class:`PtyRefused` (409) for one that has ended, was not submitted with
    a pseudo-terminal or whose task has not been launched yet."""
    with ctl.lock:
        live = ctl.jobs.get(job_id)
        if live is None:
            if ctl.persist.job_exists(job_id):
                raise PtyRefused(409, f"job {job_id} has ended")
            raise UnknownJobError(job_id)
        if live.request.pty is None:
            raise PtyRefused(
                409, f"job {job_id} has no pseudo-terminal (it was not submitted by run --pty)"
            )
        task = next((t for t in live.tasks.values() if t.launch.pty and not t.remote), None)
        if task is None:
            raise PtyRefused(409, f"job {job_id} has not started yet")
        return task.launch.task_id, task.node


def agent_task(ctl: Controller, task_id: str, node: str) -> tuple[str, bool]:
    """(job, whether it is a step's) of ``task_id``, a live or recently finished
    pseudo-terminal task on ``node`` (a command that ends at once: its agent may post the
    last output after its exit ended the job, before ``run`` first asked for it);
    :class:`PtyRefused` (404) for a task that is not (any more) one of that node's, 409 for
    one without a terminal."""
    with ctl.lock:
        entry = ctl.tasks.get(task_id)
        if entry is not None:
            job_id, task = entry
        else:
            job_id, found = job_of(task_id), ctl.finished.get(task_id)
            if found is None:
                raise PtyRefused(404, f"no live task {task_id!r} on node {node!r}")
            task = found
        if task.node != node:
            raise PtyRefused(404, f"no live task {task_id!r} on node {node!r}")
        if task.launch.pty is None:
            raise PtyRefused(409, f"task {task_id} has no pseudo-terminal")
        return job_id, task.remote


def step_task(ctl: Controller, task_id: str) -> tuple[str, str]:
    """(job, node) of ``task_id``, a live job step's task on a pseudo-terminal (``srun
    --pty``); :class:`PtyRefused` (404) for a task that is not live, 409 for one of the
    job's own or without a terminal."""
    with ctl.lock:
        entry = ctl.tasks.get(task_id)
        if entry is None:
            raise PtyRefused(404, f"no live task {task_id!r}")
        job_id, task = entry
        if not task.remote:
            raise PtyRefused(409, f"task {task_id} is its job's own: attach to job {job_id}")
        if task.launch.pty is None:
            raise PtyRefused(409, f"task {task_id} has no pseudo-terminal (srun without --pty)")
        return job_id, task.node


def refuse_older(ctl: Controller, name: str, node: LiveNode, now: float) -> None:
    """Fail to start the pseudo-terminal launches of ``node``'s outbox (with the lock
    held): its agent does not say ``pty=true``, and would refuse the whole reply (it does not
    know the field) or, older still, run the task without a terminal nobody could type to."""
    refused = [launch for launch in node.outbox if launch.pty is not None]
    if not refused:
        return
    node.outbox = [launch for launch in node.outbox if launch.pty is None]
    why = OLDER_AGENT.format(node=name)
    for launch in refused:
        log.warning("task %s: %s", launch.task_id, why)
        report = TaskReport(task_id=launch.task_id, state=TaskState.FAILED_TO_START, reason=why)
        endings.task_report(ctl, report, now)
