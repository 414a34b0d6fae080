"""Tasks that outlive their job's run. A job ends once its own tasks (a batch job's script)
have exited; a job step's task still running then (one that ignores SIGTERM: an interactive
bash under ``srun --pty``, ``trap '' TERM``) is killed after the grace, when the controller
has already forgotten the run's tasks (the job ended or was requeued, restarts in place, or
could not be adopted after a restart). Such a task is kept here (:func:`forgotten`) until
its end is known, so that it does not stay ``running`` for ever: the exit its agent reports
is written as any task's (:func:`exited`), and a task its agent no longer lists in a full
beat, or whose agent restarts or node falls silent, is written as lost (:func:`lost`); one
past the cap is written lost at once, fenced should it show up again.

A restarted controller knows none of them: the tasks the store shows running on a node that
registers for the first time since the start, of no run it adopted, wait here as well
(:func:`node_back`), their exit written when it comes, or their loss when the node's first
full beat does not list them.

Its CPU ids went back to its node's pool when it was forgotten
(:func:`~fusesched.controller.step_cpus.release_unended`); nothing of its job changes with
its end (the job's exit is the one it had). Slurm too records a step's end after its job's.

Every function here runs with the controller's lock held.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable
from typing import TYPE_CHECKING

from fusesched.api.wire import TaskLaunch, TaskReport, TaskState
from fusesched.controller import task_usage
from fusesched.controller.pools import Grant
from fusesched.controller.records import LiveTask
from fusesched.store.records import JobState

if TYPE_CHECKING:
    from fusesched.controller.service import Controller

#: The most tasks kept waiting for their end (the oldest are written lost past it).
MAX_KEPT = 10_000


def forgotten(ctl: Controller, tasks: Iterable[LiveTask]) -> None:
    """The controller forgets a run's ``tasks``: those that have not ended, on nodes of its
    agents, wait here."""
    for task in tasks:
        if task.state in ("delivered", "running") and task.node in ctl.nodes:
            ctl.outliving[task.launch.task_id] = task
    _cap(ctl)


def node_back(ctl: Controller, node: str) -> None:
    """``node`` registers for the first time since the controller started: the tasks the
    store shows running there that no job here runs (their job ended, was requeued or ran
    again before the restart, or was requeued since) wait for their end; those this
    controller saw end are left out (their end may not be written yet)."""
    for row in ctl.persist.store.tasks_on_node(node, [JobState.RUNNING]):
        if row.task_id in ctl.tasks or row.task_id in ctl.outliving:
            continue
        task = ctl.finished.get(row.task_id)
        if task is None:
            launch = TaskLaunch(task_id=row.task_id, job_id=row.job_id)
            remote = ".remote." in row.task_id
            task = LiveTask(launch, node, Grant(), remote, "delivered", start_time=row.start_time)
        if task.state != "exited":
            ctl.outliving[row.task_id] = task
    _cap(ctl)


def _cap(ctl: Controller) -> None:
    """Past :data:`MAX_KEPT`, the oldest are written lost (fenced should they show up)."""
    while len(ctl.outliving) > MAX_KEPT:
        task = next(iter(ctl.outliving.values()))
        task.lost = True
        _ended(ctl, task, -1, "lost: too many tasks outlived their jobs", ctl.clock())


def exited(ctl: Controller, report: TaskReport, now: float) -> None:
    """A forgotten task's agent reports its exit (a RUNNING report changes nothing)."""
    task = ctl.outliving.get(report.task_id)
    if task is not None and report.state is not TaskState.RUNNING:
        code = report.exit_code if report.exit_code is not None else 127
        _ended(ctl, task, code, report.reason, now)


def lost(
    ctl: Controller,
    node: str,
    alive: Collection[str],
    reason: str,
    now: float,
    beat: bool = False,
    code: int = -1,
) -> None:
    """The forgotten tasks on ``node`` not in ``alive`` are gone (their agent lists them no
    more, restarted, or the node fell silent): ended with ``code``, fenced should they show
    up again. ``beat``: ``alive`` is what a full beat listed, which may predate a launch
    sent on a quick report (as :func:`~fusesched.controller.endings.lose_tasks`)."""
    for task in list(ctl.outliving.values()):
        if task.node != node or task.launch.task_id in alive:
            continue
        if not beat or now >= task.unconfirmed_until:
            task.lost = True
            _ended(ctl, task, code, reason, now)


def _ended(ctl: Controller, task: LiveTask, code: int, reason: str, now: float) -> None:
    del ctl.outliving[task.launch.task_id]
    task.state, task.exit_code, task.reason, task.end_time = "exited", code, reason, now
    ctl.persist.task_ended(task, now)
    task_usage.task_ended(ctl, task)
