"""The controller's side of the tasks' probes (the agents run them: agent/probes.py).

* launches go without their probes to an agent too old to run them (:func:`without_probes`);
* the ready states agents report are kept on each live task, with the time of the change
  (:func:`heard`);
* ``GET /v1/jobs/{id}`` shows each running task's readiness and whether the job is ready
  (:func:`with_readiness`).

A liveness probe's failure is a failure of the job, which its restart policy answers
(:func:`fusesched.controller.failures.liveness_failed`).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING

from fusesched.api.job_schemas import JobView, TaskView
from fusesched.api.wire import Heartbeat, TaskLaunch

if TYPE_CHECKING:
    from fusesched.controller.records import LiveTask
    from fusesched.controller.service import Controller

log = logging.getLogger("fusesched.controller")


def without_probes(node: str, launches: list[TaskLaunch]) -> list[TaskLaunch]:
    """``launches`` for an agent too old for probes (its reply model would refuse the whole
    reply): without their probes (logged). Such tasks' readiness stays unknown."""
    out: list[TaskLaunch] = []
    for sent in launches:
        if sent.liveness is not None or sent.readiness is not None:
            log.warning(
                "node %s's agent is too old to run probes: task %s starts without them",
                node,
                sent.task_id,
            )
            sent = sent.model_copy(update={"liveness": None, "readiness": None})
        out.append(sent)
    return out


def heard(ctl: Controller, beat: Heartbeat, now: float) -> None:
    """Keep the ready states ``beat`` reports of its node's own running tasks (with the lock
    held)."""
    for task_id, ready in beat.ready.items():
        entry = ctl.tasks.get(task_id)
        if entry is None or entry[1].node != beat.node or entry[1].state == "exited":
            continue
        task = entry[1]
        if task.ready is not ready:
            task.ready, task.ready_since = ready, now


def with_readiness(ctl: Controller, views: Sequence[JobView]) -> list[JobView]:
    """``views`` with the readiness of each task with a readiness probe (``ready``,
    ``ready_since``) and of each job not ended (``ready``, see :func:`job_ready`)."""
    out: list[JobView] = []
    with ctl.lock:
        for view in views:
            live = ctl.jobs.get(view.id)
            if live is None:
                out.append(view)
                continue
            tasks = [_task_view(t, live.tasks.get(t.task_id)) for t in view.tasks]
            ready = job_ready(list(live.tasks.values()))
            out.append(view.model_copy(update={"tasks": tasks, "ready": ready}))
    return out


def task_ready(task: LiveTask) -> bool | None:
    """Whether a task with a readiness probe is ready: not before it runs, as its agent last
    said while it runs (None: not said yet, or its agent never says: an older one)."""
    return task.ready if task.state == "running" else False


def job_ready(tasks: Sequence[LiveTask]) -> bool | None:
    """A job is ready when every task of it with a readiness probe (not ended) is; not ready
    when one is not; None (unknown) when one's readiness is unknown, and when none has a
    readiness probe."""
    probed = [
        task_ready(t)
        for t in tasks
        if not t.remote and t.launch.readiness is not None and t.state != "exited"
    ]
    if not probed:
        return None
    if any(ready is False for ready in probed):
        return False
    return None if any(ready is None for ready in probed) else True


def _task_view(view: TaskView, task: LiveTask | None) -> TaskView:
    if task is None or task.state == "exited" or task.launch.readiness is None:
        return view
    since = task.ready_since if task.state == "running" else None
    return view.model_copy(update={"ready": task_ready(task), "ready_since": since})
