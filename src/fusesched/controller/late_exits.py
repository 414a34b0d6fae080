"""Tasks that outlive their job's run. A job ends once its own tasks (a batch job's script)
have exited; a job step's task still running then (one that ignores SIGTERM: an interactive
bash under ``srun --pty``, ``trap '' TERM``) is killed after the grace, when the controller
has already forgotten the run's tasks (the job ended or was requeued, restarts in place, or
could not be adopted after a restart). Such a task is kept here (:func:`forgotten`) until
its end is known, so that it does not stay ``running`` for ever: the exit its agent reports
is written as any task's (:func:`exited`), and a task its agent no longer lists in a full
beat, or whose agent restarts or node falls silent, is written as lost (:func:`lost`).

Its CPU ids went back to its node's pool when it was forgotten
(:func:`~fusesched.controller.step_cpus.release_unended`); nothing of its job changes with
its end (the job's exit is the one it had). Slurm too records a step's end after its job's.

Every function here runs with the controller's lock held.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable
from typing import TYPE_CHECKING

from fusesched.api.wire import TaskReport, TaskState
from fusesched.controller import task_usage

if TYPE_CHECKING:
    from fusesched.controller.records import LiveTask
    from fusesched.controller.service import Controller

#: The most tasks kept waiting for their end (the oldest are dropped past it).
MAX_KEPT = 10_000


def forgotten(ctl: Controller, tasks: Iterable[LiveTask]) -> None:
    """The controller forgets a run's ``tasks``: those that have not ended, on nodes of its
    agents, wait here."""
    for task in tasks:
        if task.state in ("delivered", "running") and task.node in ctl.nodes:
            ctl.outliving[task.launch.task_id] = task
    while len(ctl.outliving) > MAX_KEPT:
        del ctl.outliving[next(iter(ctl.outliving))]


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
