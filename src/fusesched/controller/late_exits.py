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
full beat does not list them. Those on a node still not back the node timeout after the
start are written lost then (:func:`never_back`).

Until its end, it keeps its CPU ids out of its node's pool (a restarted controller: those
its agent lists it with), and its job's booking on its node stays held (Slurm's COMPLETING:
controller/completing.py); nothing else of its job changes with its end (the job's exit is
the one it had). Slurm too records a step's end after its job's.

Every function here runs with the controller's lock held.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable
from dataclasses import replace
from itertools import chain
from typing import TYPE_CHECKING

from fusesched.api.wire import NodeInventory, TaskLaunch, TaskReport, TaskState
from fusesched.controller import task_usage
from fusesched.controller.pools import Grant
from fusesched.controller.records import LiveJob, LiveTask
from fusesched.store.records import JobState, TaskRow

if TYPE_CHECKING:
    from fusesched.controller.service import Controller

#: The most tasks kept waiting for their end (the oldest are written lost past it).
MAX_KEPT = 10_000


def outlives(ctl: Controller, task: LiveTask) -> bool:
    """Whether ``task`` waits here if its run is forgotten now: it has not ended, and runs
    on a node of the controller's agents."""
    return task.state in ("delivered", "running") and task.node in ctl.nodes


def nodes_left(ctl: Controller, tasks: Iterable[LiveTask]) -> tuple[str, ...]:
    """The nodes where some of a run's ``tasks`` would wait here were it forgotten now."""
    return tuple(sorted({task.node for task in tasks if outlives(ctl, task)}))


def forgotten(ctl: Controller, tasks: Iterable[LiveTask]) -> None:
    """The controller forgets a run's ``tasks``: those that have not ended, on nodes of its
    agents, wait here."""
    for task in tasks:
        if outlives(ctl, task):
            ctl.outliving[task.launch.task_id] = task
    _cap(ctl)


def node_back(ctl: Controller, inventory: NodeInventory) -> None:
    """A node registers for the first time since the controller started: the tasks the
    store shows running there that no job here runs (their job ended, was requeued or ran
    again before the restart, or was requeued since) wait for their end, holding the CPU
    ids its agent lists them with; those this controller saw end are left out (their end
    may not be written yet)."""
    node = inventory.name
    listed = {launch.task_id: launch for launch in inventory.running}
    for row in ctl.persist.store.tasks_on_node(node, [JobState.RUNNING]):
        if row.task_id in ctl.tasks or row.task_id in ctl.outliving:
            continue
        task = ctl.finished.get(row.task_id)
        if task is None:
            task = _stored(row, node)
            said = listed.get(row.task_id)
            if said is not None and said.job_id == row.job_id:
                task.grant = Grant(tuple(said.cpu_ids))
                ctl.nodes[node].pool.claim(task.grant)
        if task.state != "exited":
            ctl.outliving[row.task_id] = task
    _cap(ctl)


def never_back(ctl: Controller, now: float) -> None:
    """The node timeout after the controller started (``adopt_until``): the tasks the store
    shows running on a node that has not registered since, that no job here runs, are
    written lost, as a silent node's (their jobs keep the end they had); a node that comes
    back later with one has it killed (fenced). They are kept with the tasks seen to end:
    a node registering before that end is stored must not find them running again
    (:func:`node_back`)."""
    from fusesched.controller.endings import FINISHED_TASKS_KEPT  # (endings imports this)

    for stored in ctl.persist.store.list_nodes():
        node = stored.name
        if node in ctl.nodes or ":" in node:  # (back; or an external pool's: its own)
            continue
        gone: list[LiveTask] = []
        for row in ctl.persist.store.tasks_on_node(node, [JobState.RUNNING]):
            if row.task_id in ctl.tasks or row.task_id in ctl.outliving:
                continue
            task = ctl.finished.get(row.task_id) or _stored(row, node)
            if task.state != "exited":
                ctl.outliving[row.task_id] = task
                gone.append(task)
        lost(ctl, node, (), f"node {node} did not come back after a controller restart", now)
        for task in gone:
            ctl.finished[task.launch.task_id] = task
    while len(ctl.finished) > FINISHED_TASKS_KEPT:
        del ctl.finished[next(iter(ctl.finished))]


def _stored(row: TaskRow, node: str) -> LiveTask:
    """A task the store shows running on ``node`` that this controller never ran, as one
    sent there (its CPU ids: none known)."""
    launch = TaskLaunch(task_id=row.task_id, job_id=row.job_id)
    remote = ".remote." in row.task_id
    return LiveTask(launch, node, Grant(), remote, "delivered", start_time=row.start_time)


def cpus_held(
    tasks: Iterable[LiveTask], node: str, skip: Callable[[LiveTask], bool] | None = None
) -> set[int]:
    """The CPU ids that those of ``tasks`` on ``node`` that have not ended hold, the ones
    ``skip`` names aside."""
    return {
        cpu
        for task in tasks
        if task.node == node and task.state != "exited" and not (skip is not None and skip(task))
        for cpu in task.grant.cpu_ids
    }


def held_cpus(ctl: Controller, node: str, live: LiveJob | None) -> set[int]:
    """The CPU ids on ``node`` that the tasks waiting here hold, and ``live``'s (their job's
    run now, restarted in place: a step's task shares its script's ids) that have not ended."""
    return cpus_held(chain(ctl.outliving.values(), live.tasks.values() if live else ()), node)


def on_node(ctl: Controller, node: str) -> bool:
    """Whether a task waiting here runs on ``node``."""
    return any(task.node == node for task in ctl.outliving.values())


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
    node = ctl.nodes.get(task.node)
    if node is not None:  # its CPU ids no other task holds (an --overlap step's, the script's)
        cpus = set(task.grant.cpu_ids)
        if cpus:
            cpus -= held_cpus(ctl, task.node, ctl.jobs.get(task.launch.job_id))
        kept = tuple(sorted(cpus))
        grant = Grant(kept) if task.remote else replace(task.grant, cpu_ids=kept)
        node.pool.give(grant, node.inventory)
    ctl.wake()  # (what its job still held on its node may be free: controller/completing.py)
