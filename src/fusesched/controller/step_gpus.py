"""Job steps' own GPUs among their job's, as Slurm gives a step its GRES (``srun
--gres=gpu:N``, ``--gpus``, ``--gpus-per-task``, ``--gpus-per-node``: agent/step_gpus.py).

A step that asks for GPUs is given, on each of its nodes, that many of the job's GPUs there
that no running step holds, lowest index first (:func:`pick_gpus`), and holds them from its
creation until every task of it has ended, as it holds its slots (controller/job_steps.py):
a step the job has too few GPUs for is refused (:class:`StepNeverFits`), one the running
steps leave too few for must wait (:class:`StepsBusy`: 409, ``srun`` tries again). Its tasks
see those GPUs (the launch's GPU indices: ``CUDA_VISIBLE_DEVICES``); with
``--gpus-per-task``, each task its own of its node's (:func:`task_gpus`). An ``--overlap``
step takes the first it asks for whoever holds them, and holds none.

A step that asks for none sees all of the job's GPUs on each of its nodes and holds none.
Slurm gives such a step all of the job's GPUs and holds them, so that a second step waits
for the first to end; fusesched shares them instead, so that steps that use no GPU (and
scripts written before steps were given GPUs) run side by side as before.

What a step holds travels in its tasks' launch environment (:func:`gpus_env`, read back by
:func:`held_gpus`), as its slots do: nothing is kept beside the live tasks, and a restarted
controller knows what the steps of the tasks it adopts hold. The job's GPUs are those the
scheduler booked for it on each node (:func:`allocated_gpus`); every remote task of the job
carries those of its node (:func:`job_gpus_env`), so that a restarted controller books the
job the same ones again where it launched nothing of its own (:func:`adopted_gpus`), not
any free ones its running steps' tasks may not be using.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING

from fusesched.api.wire import BATCH_GPUS_ENV
from fusesched.controller.job_steps import StepNeverFits, StepsBusy, share_of
from fusesched.model.resources import GPU

if TYPE_CHECKING:
    from fusesched.controller.records import LiveJob
    from fusesched.controller.service import Controller
    from fusesched.core.placement import Allocation

#: The GPUs a step holds on each of its nodes: ``node:0+1,node-b:2`` (``node:``: none).
STEP_GPUS_ENV = "FUSESCHED_STEP_GPUS"

#: The job's GPUs on a remote task's node (``0+1``), for a restarted controller.
JOB_GPUS_ENV = "FUSESCHED_STEP_JOB_GPUS"

#: GPU indices per node.
NodeGpus = dict[str, tuple[int, ...]]


def allocated_gpus(
    allocation: Allocation | None, names: Sequence[str], groups: Iterable[str] | None = None
) -> NodeGpus:
    """The whole GPUs (by index) the scheduler's ``allocation`` of a job holds on each node
    (``names``: the nodes by row), of its task groups ``groups`` (None: all); MIG instances
    are not counted."""
    found: dict[str, set[int]] = {}
    if allocation is None:
        return {}
    wanted = None if groups is None else set(groups)
    for (shape, _, _), devices in zip(allocation.groups, allocation.devices, strict=False):
        if devices is None or (wanted is not None and shape.name not in wanted):
            continue
        for task in devices.tasks:
            held = found.setdefault(names[task.row], set())
            held.update(i for kind, i in zip(task.kinds, task.indices, strict=True) if kind == GPU)
    return {node: tuple(sorted(held)) for node, held in found.items()}


def job_gpus(ctl: Controller, live: LiveJob, groups: Iterable[str] | None = None) -> NodeGpus:
    """The whole GPUs ``live`` holds on each of its nodes, as the scheduler booked them
    (of its task groups ``groups``; None: all). The caller holds the controller's lock."""
    record = ctl.core.jobs.get(live.id)
    allocation = record.allocation if record is not None else None
    return allocated_gpus(allocation, ctl.core.cluster.names, groups)


def helper_gpus(ctl: Controller, live: LiveJob, node: str, step: int | None) -> tuple[int, ...]:
    """The GPUs a helper of ``live`` on ``node`` sees (mpirun's daemon, whose ranks inherit
    them): those its step holds there (``step``: of a step that holds some), else all of the
    job's there."""
    for task in live.tasks.values():
        share = share_of(task.launch.env) if task.remote and task.state != "exited" else None
        gpus = gpus_of(task.launch.env) if share is not None and share.step_id == step else None
        if gpus is not None:
            return gpus.get(node, ())
    return job_gpus(ctl, live).get(node, ())


def job_gpus_env(gpus: Sequence[int]) -> dict[str, str]:
    """The mark that tells a restarted controller the job's GPUs on a task's node."""
    return {JOB_GPUS_ENV: "+".join(map(str, gpus))} if gpus else {}


def adopted_gpus(envs: Iterable[Mapping[str, str]]) -> tuple[int, ...]:
    """The job's GPUs on a node, as the launch environments ``envs`` of its tasks there
    mark them (its remote tasks': :func:`job_gpus_env`; its batch script's: the GPUs it
    sees, :data:`~fusesched.api.wire.BATCH_GPUS_ENV`); () when none does."""
    found: set[int] = set()
    for env in envs:
        parts = env.get(JOB_GPUS_ENV, "").split("+") + env.get(BATCH_GPUS_ENV, "").split(",")
        found.update(int(p) for p in parts if p.isascii() and p.isdigit() and len(p) <= 6)
    return tuple(sorted(found))


def gpus_env(gpus: Mapping[str, Sequence[int]]) -> dict[str, str]:
    """The mark that makes a step's tasks hold ``gpus`` (per node)."""
    text = ",".join(f"{node}:{'+'.join(map(str, held))}" for node, held in gpus.items())
    return {STEP_GPUS_ENV: text}


def gpus_of(env: Mapping[str, str]) -> NodeGpus | None:
    """The GPUs per node a task's launch environment marks its step as holding; None when
    it marks none (a step that asked for no GPUs) or the mark does not read as one."""
    text = env.get(STEP_GPUS_ENV)
    if not text:
        return None
    out: NodeGpus = {}
    for item in text.split(","):
        node, _, held = item.rpartition(":")
        parts = held.split("+") if held else []
        if not node or not all(p.isascii() and p.isdigit() and len(p) <= 6 for p in parts):
            return None
        out[node] = tuple(int(p) for p in parts)
    return out


def held_gpus(envs: Iterable[Mapping[str, str]]) -> dict[int, NodeGpus]:
    """The GPUs per node each running step holds (by step id), from the launch
    environments ``envs`` of the job's live tasks: ``--overlap`` steps hold none."""
    found: dict[int, NodeGpus] = {}
    for env in envs:
        share = share_of(env)
        gpus = gpus_of(env) if share is not None and not share.overlap else None
        if share is not None and gpus is not None:
            found.setdefault(share.step_id, gpus)
    return found


def pick_gpus(
    job: Mapping[str, Sequence[int]],
    asked: Mapping[str, int],
    overlap: bool,
    held: Mapping[int, Mapping[str, Sequence[int]]],
) -> NodeGpus:
    """Which of the job's GPUs (``job``: per node) a step asking ``asked`` per node gets
    beside the running steps' (``held``, by step id): the lowest free indices (an
    ``--overlap`` step: the lowest, free or not). :class:`StepNeverFits` when the job has too
    few on a node, :class:`StepsBusy` when the running steps hold too many there now."""
    for node, count in asked.items():
        has = len(job.get(node, ()))
        if count > has:
            raise StepNeverFits(
                f"the step asks for {count} GPU(s) on {node}; the job has {has} there"
            )
    picked: NodeGpus = {}
    full: dict[str, str] = {}
    for node, count in asked.items():
        taken = set() if overlap else {i for gpus in held.values() for i in gpus.get(node, ())}
        free = [i for i in sorted(job.get(node, ())) if i not in taken]
        if count > len(free):
            has = len(job[node])
            full[node] = f"{node} has {has - len(free)} of {has} GPUs in use"
        picked[node] = tuple(free[:count])
    if full:
        steps = sorted(step for step, gpus in held.items() if any(gpus.get(n) for n in full))
        said = "; ".join(full.values())
        raise StepsBusy(
            f"Requested nodes are busy: {said} (by step(s) {', '.join(map(str, steps))})"
        )
    return picked


def task_gpus(step: Sequence[int], per_task: int | None, local: int) -> tuple[int, ...]:
    """The GPUs the ``local``-th of a step's tasks on a node sees of the step's there
    (``step``): its own ``per_task`` of them in task order (``--gpus-per-task``), else all."""
    if per_task is None:
        return tuple(step)
    return tuple(step[local * per_task : (local + 1) * per_task])


def gpu_env(gpus: Sequence[int]) -> dict[str, str]:
    """The Slurm variables of a step's task whose step holds ``gpus`` on its node:
    ``SLURM_STEP_GPUS`` (their indices, when any) and ``SLURM_GPUS_ON_NODE`` (how many)."""
    env = {"SLURM_GPUS_ON_NODE": str(len(gpus))}
    if gpus:
        env["SLURM_STEP_GPUS"] = ",".join(map(str, gpus))
    return env
