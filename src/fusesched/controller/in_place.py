"""The tasks of a job restarting in place (:func:`relaunched`, for
:func:`failures.relaunch_due`): every task of its run, launched again on its node as its
last launch was, under the new run's id and restart count, holding what it held (its CPU
ids only if no other job's task started meanwhile took them).

After a controller restart, the run's tasks that an agent gave back (controller/adoption.py)
have their launch as it was sent; the others (those that had exited before the restart, or
during it: ``LiveTask.rebuilt``) only their id, node and devices from the store. Their
launch is built again as the run's start built it (controller/run_launches.py), from the
slots of all the run's tasks, with the CPUs their node has free now. A batch job's script
cannot be: the task slots of its allocation were in its lost launch's hostfile only
(:func:`rebuildable`); the job is requeued instead. A rebuilt run gets a new job token (the
old one's secret is not stored), which all its tasks get, those given back too; the old
token is revoked first, as a run's end revokes it.

Every function here runs with the controller's lock held.
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import chain
from typing import TYPE_CHECKING

from fusesched.controller import late_exits
from fusesched.controller.launchenv import ranked_slots
from fusesched.controller.pools import Grant
from fusesched.controller.records import LiveJob, LiveTask
from fusesched.controller.run_launches import RunLaunches, revoke_job_tokens
from fusesched.model.resources import CPU, Resources
from fusesched.submit.launch_mode import batch_mode

if TYPE_CHECKING:
    from fusesched.controller.service import Controller

#: Why a batch job whose script's launch was lost is requeued rather than restarted in place.
UNKNOWN_ALLOCATION = "its script's launch was lost with a controller restart"


def rebuildable(live: LiveJob, main: Sequence[LiveTask]) -> bool:
    """Whether every task of ``main`` (``live``'s own, of its run) can be launched again:
    not a batch job's script whose launch is rebuilt (its allocation's slots are unknown)."""
    return not (batch_mode(live.request) and any(t.rebuilt for t in main))


def relaunched(
    ctl: Controller, live: LiveJob, main: Sequence[LiveTask], attempt: int, now: float
) -> dict[str, LiveTask]:
    """``main`` launched again as run ``attempt`` of ``live`` (sent to their nodes), by new
    task id, holding what they held: their devices (the core's booking), and their CPU ids
    where no other job's task holds them (:func:`_kept`); the others take CPUs free now."""
    kept = _kept(ctl, main)
    run = _rebuilt_run(ctl, live, main, attempt, now) if any(t.rebuilt for t in main) else None
    fresh: dict[str, LiveTask] = {}
    for old in main:
        _, group, index = old.launch.task_id.rsplit(".", 2)
        task_id = f"{live.id}-r{attempt}.{group}.{index}"
        node = ctl.nodes[old.node]
        grant = old.grant
        if run is not None and old.rebuilt:
            cpus = node.pool.take(Resources({CPU: run.per_task[group].get(CPU)}))
            grant = Grant(cpus.cpu_ids, old.grant.gpu_indices, old.grant.gpu_uuids)
            slot = next(s for s in run.slots if s.task_id == task_id)
            launch = run.launch(slot, grant)
        else:
            if old.launch.task_id not in kept:  # (as many CPUs as it held, others)
                cpus = node.pool.take(Resources({CPU: 1000 * len(old.grant.cpu_ids)}))
                grant = Grant(cpus.cpu_ids, old.grant.gpu_indices, old.grant.gpu_uuids)
            env = old.launch.env | {
                "FUSESCHED_TASK_ID": task_id,
                "FUSESCHED_RESTART_COUNT": str(attempt),
            }
            if run is not None:  # (the old job token is revoked: the run's new one)
                env.update(run.secret)
            update = {"task_id": task_id, "env": env, "cpu_ids": list(grant.cpu_ids)}
            launch = old.launch.model_copy(update=update)
        fresh[task_id] = LiveTask(launch, old.node, grant, start_time=now)
        node.outbox.append(launch)
    return fresh


def _kept(ctl: Controller, main: Sequence[LiveTask]) -> set[str]:
    """Claim again on their nodes what the tasks of ``main`` held: every one's devices (the
    core kept them booked), and the CPU ids of those whose ids no other job's task holds
    (their exits gave them back: a job started on the node meanwhile may have taken some;
    the job's own old steps still dying may keep theirs, pinned to them); returns the ids
    of the tasks that keep their CPU ids."""
    kept: set[str] = set()
    others: dict[str, set[int]] = {}
    for old in main:
        pool = ctl.nodes[old.node].pool
        if old.node not in others:
            others[old.node] = _others_cpus(ctl, old)
        mine = not old.rebuilt and not set(old.grant.cpu_ids) & others[old.node]
        cpus = old.grant.cpu_ids if mine else ()
        pool.claim(Grant(cpus, old.grant.gpu_indices, old.grant.gpu_uuids))
        if mine:
            kept.add(old.launch.task_id)
    return kept


def _others_cpus(ctl: Controller, task: LiveTask) -> set[int]:
    """The CPU ids other jobs' tasks that have not ended hold on ``task``'s node."""
    job = task.launch.job_id
    tasks = chain((t for _, t in ctl.tasks.values()), ctl.outliving.values())
    return late_exits.cpus_held(tasks, task.node, skip=lambda t: t.launch.job_id == job)


def _rebuilt_run(
    ctl: Controller, live: LiveJob, main: Sequence[LiveTask], attempt: int, now: float
) -> RunLaunches:
    """Run ``attempt`` over the slots of ``main`` (the whole gang: not a batch job), in rank
    order: groups as the job declares them, each group's tasks by index; under a new job
    token, the job's older ones revoked."""
    declared = [g.name for g in live.request.groups]
    placed = []
    for task in main:
        _, group, index = task.launch.task_id.rsplit(".", 2)
        placed.append((group, task.node, int(index)))
    placed.sort(key=lambda p: (declared.index(p[0]), p[2]))
    rec = ctl.core.jobs.get(live.id)
    shapes = rec.groups if rec is not None and rec.groups is not None else live.spec.task_groups
    per_task = {g.name: g.resources for g in shapes}
    slots = ranked_slots(f"{live.id}-r{attempt}", placed)
    revoke_job_tokens(ctl, [live.id])  # (before the new one is issued)
    return RunLaunches.of(ctl, live, slots, per_task, attempt, now)
