"""Which task of a job runs on a pseudo-terminal (``fusesched run --pty``; a step's, ``srun
--pty``), as the relay's routes ask it (:mod:`fusesched.api.pty_routes`), and the refusal of
such a launch by an agent too old to relay it (:func:`refuse_older`). The lookups take the
controller's lock.

After a controller restart a running job's tasks are known from the store before their
agent reports them again (a ``run --pty`` job's own task with the job's terminal, a step's
without: a stored task has no launch): until its node has registered again, and a step's
task has been reported, the lookups answer 503 (:data:`ADOPTING`), which both ends wait
out, not 409. A ``run --pty`` task that ended while the controller was away is relayed still:
its agent posts the output it kept, which its client reads though the job has ended.

So is one that ended at once (``tty; exit 4``): its exit can end the job before its agent
posts what it wrote, and before its client first asks. Each lookup says how long ago its task
exited (:attr:`TaskRef.ended_s`): the relay waits for that last output a bounded time."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from fusesched.api.wire import TaskReport, TaskState
from fusesched.controller import endings
from fusesched.controller.logs import job_of
from fusesched.controller.pty_relay import TaskRef
from fusesched.controller.records import UnknownJobError

if TYPE_CHECKING:
    from fusesched.controller.records import LiveJob, LiveNode, LiveTask
    from fusesched.controller.service import Controller

log = logging.getLogger("fusesched.controller")

#: Why a pseudo-terminal task does not start on an agent older than the relay.
OLDER_AGENT = (
    "the agent of node {node} is too old for a pseudo-terminal (fusesched run --pty): "
    "upgrade it, or run the job without --pty"
)


#: Why a terminal is not relayed yet after a controller restart.
ADOPTING = (
    "the controller restarted: task {task} is relayed again once node {node} has reported it "
    "(try again)"
)


class PtyRefused(ValueError):
    """The relay cannot serve this call; ``status`` is the HTTP answer (404, 409, or 503
    while its task waits to be adopted after a restart)."""

    def __init__(self, status: int, why: str) -> None:
        super().__init__(why)
        self.status = status


def _unreported(ctl: Controller, live: LiveJob | None, task: LiveTask) -> PtyRefused | None:
    """The 503 for a task of a job adopted after a restart whose node has not registered
    again, or (a step's) whose launch, and so its terminal, is not known again yet; None
    otherwise."""
    if live is None or not live.adopting:
        return None
    if task.node in ctl.nodes and task.launch.pty is not None:
        return None
    return PtyRefused(503, ADOPTING.format(task=task.launch.task_id, node=task.node))


def client_task(ctl: Controller, job_id: str) -> TaskRef:
    """``job_id``'s pseudo-terminal task. :class:`UnknownJobError` for an unknown job;
    :class:`PtyRefused` (409) for one that has ended, was not submitted with a
    pseudo-terminal or whose task has not been launched yet (503: not reported again after
    a restart)."""
    with ctl.lock:
        live = ctl.jobs.get(job_id)
        if live is None:
            ended = _ended_own(ctl, job_id)
            if ended is not None:  # (its last output may come after its end)
                return ended
            if ctl.persist.job_exists(job_id):
                raise PtyRefused(409, f"job {job_id} has ended")
            raise UnknownJobError(job_id)
        if live.request.pty is None:
            raise PtyRefused(
                409, f"job {job_id} has no pseudo-terminal (it was not submitted by run --pty)"
            )
        own = [t for t in live.tasks.values() if not t.remote]
        unreported = next((r for t in own if (r := _unreported(ctl, live, t))), None)
        if unreported is not None:
            raise unreported
        task = next((t for t in own if t.launch.pty), None)
        if task is None:
            raise PtyRefused(409, f"job {job_id} has not started yet")
        ended_s = _ended_s(ctl, task)
        return TaskRef(job_id, task.launch.task_id, task.node, False, live.spec.user, ended_s)


def recovered(ctl: Controller) -> set[str]:
    """The ``run --pty`` jobs' own tasks left running by a previous controller (at start)."""
    return {
        task_id
        for live in ctl.jobs.values()
        if live.adopting and live.request.pty is not None
        for task_id, task in live.tasks.items()
        if not task.remote
    }


def _ended_own(ctl: Controller, job_id: str) -> TaskRef | None:
    """The terminal task of ``job_id``, a ``run --pty`` job that has ended, if its agent may
    still post output: a task a previous controller had started (it may have ended while no
    controller ran: its agent posts the output it kept, whenever it is back), or one this
    controller saw run and exit (a command that ends at once: its exit can end the job before
    its agent posts what it wrote). Not one lost with its node, nor one that never started:
    neither posts anything, and a session opened for it would wait for nothing."""
    for task_id in ctl.pty_relay.recovered:
        task = ctl.finished.get(task_id)
        if task is not None and job_of(task_id) == job_id and _relayed(task):
            return TaskRef(job_id, task_id, task.node, False, task.launch.user)
    for task_id, task in reversed(ctl.finished.items()):  # (newest first)
        ran = task.pid is not None and not task.remote  # (the job's own, started)
        if ran and job_of(task_id) == job_id and _relayed(task):
            user = task.launch.user
            return TaskRef(job_id, task_id, task.node, False, user, _ended_s(ctl, task))
    return None


def _relayed(task: LiveTask) -> bool:
    """Whether ``task`` ran on a terminal its agent relays (not given up on as lost)."""
    return not task.lost and task.launch.pty is not None


def _ended_s(ctl: Controller, task: LiveTask) -> float | None:
    """How long ago ``task`` exited (seconds); None while it runs, and for one a previous
    controller had started (its agent posts what it kept once it is back, however late)."""
    if task.state != "exited" or task.launch.task_id in ctl.pty_relay.recovered:
        return None
    now = ctl.clock()
    return max(0.0, now - (task.end_time if task.end_time is not None else now))


def agent_task(ctl: Controller, task_id: str, node: str) -> TaskRef:
    """``task_id``, a live or recently finished pseudo-terminal task on ``node`` (a command
    that ends at once: its agent may post the last output after its exit ended the job,
    before ``run`` first asked for it); :class:`PtyRefused` (404) for a task that is not (any
    more) one of that node's or was given up on as lost, 409 for one without a terminal (503:
    not reported again after a restart)."""
    with ctl.lock:
        entry = ctl.tasks.get(task_id)
        if entry is not None:
            job_id, task = entry
        else:
            job_id, found = job_of(task_id), ctl.finished.get(task_id)
            if found is None:
                raise PtyRefused(404, f"no live task {task_id!r} on node {node!r}")
            task = found
        if task.node != node or task.lost:  # (lost: given up on with its node, fenced)
            raise PtyRefused(404, f"no live task {task_id!r} on node {node!r}")
        live = ctl.jobs.get(job_id)
        unreported = _unreported(ctl, live, task)
        if unreported is not None:
            raise unreported
        if task.launch.pty is None:
            raise PtyRefused(409, f"task {task_id} has no pseudo-terminal")
        user = live.spec.user if live is not None else task.launch.user
        return TaskRef(job_id, task_id, node, task.remote, user, _ended_s(ctl, task))


def step_task(ctl: Controller, task_id: str) -> TaskRef:
    """``task_id``, a live job step's task on a pseudo-terminal (``srun --pty``);
    :class:`PtyRefused` (404) for a task that is not live, 409 for one of the job's own or
    without a terminal (503: not reported again after a restart)."""
    with ctl.lock:
        entry = ctl.tasks.get(task_id)
        if entry is None:
            raise PtyRefused(404, f"no live task {task_id!r}")
        job_id, task = entry
        if not task.remote:
            raise PtyRefused(409, f"task {task_id} is its job's own: attach to job {job_id}")
        live = ctl.jobs.get(job_id)
        unreported = _unreported(ctl, live, task)
        if unreported is not None:
            raise unreported
        if task.launch.pty is None:
            raise PtyRefused(409, f"task {task_id} has no pseudo-terminal (srun without --pty)")
        user = live.spec.user if live is not None else task.launch.user
        return TaskRef(job_id, task_id, task.node, True, user, _ended_s(ctl, task))


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
