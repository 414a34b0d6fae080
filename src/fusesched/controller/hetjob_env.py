"""What a heterogeneous job's batch script is given of its components (Slurm's ``hetjob``:
``docs/SUBMIT.md``, "Heterogeneous jobs"), without I/O.

A heterogeneous job's task groups are its components, in order (component 0 is the first
group). Its batch script runs once, on component 0's first task, and gets, as Slurm gives
them: ``SLURM_HET_SIZE`` (and its older name ``SLURM_PACK_SIZE``); for each component ``n``
the allocation variables suffixed ``_HET_GROUP_<n>`` (``SLURM_JOB_NODELIST_HET_GROUP_1``,
``SLURM_NTASKS_HET_GROUP_1``, ``SLURM_JOB_CPUS_PER_NODE_HET_GROUP_1``, …, with
``SLURM_JOB_ID_HET_GROUP_<n>``, ``SLURM_CPUS_PER_TASK_HET_GROUP_<n>``, the job's name, the
partition, the account and the QoS; and fusesched's own
``FUSESCHED_MEM_PER_TASK_HET_GROUP_<n>`` (bytes) and ``FUSESCHED_GPUS_PER_TASK_HET_GROUP_<n>``,
from which ``srun --het-group`` tells its tasks what their components hold on their node); its
unsuffixed allocation variables (``SLURM_NTASKS``, ``SLURM_JOB_NODELIST``…) are component 0's,
the one ``srun`` runs on by default (controller/drivers.py); ``srun --het-group`` gives its
tasks those of the components it runs on (agent/step_het.py). Each component also gets a
hostfile of its own beside the job's (:func:`het_hostfile_name`), which ``srun --het-group``
places its tasks in and the controller counts a step's slots against (controller/steps.py);
``mpirun`` in the script spans the whole job's.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Final

from pydantic import ValidationError

from fusesched.agent.step_het import (
    GPUS_PER_TASK_ENV,
    HET_SIZE_ENV,
    HET_SUFFIX,
    MEM_PER_TASK_ENV,
    het_hostfile_name,
)
from fusesched.api.job_schemas import ComponentView
from fusesched.controller.launchenv import SlurmJob, TaskSlot, allocation_env, hostfile
from fusesched.hostlist import tasks_per_node
from fusesched.model.resources import CPU, GPU, MEMORY, Resources
from fusesched.submit.label_terms import GroupPlacementRequest

#: Slurm's older name of :data:`HET_SIZE_ENV` (from when heterogeneous jobs were "pack jobs").
PACK_SIZE_ENV: Final = "SLURM_PACK_SIZE"


@dataclass(frozen=True, slots=True)
class Component:
    """One component of a started heterogeneous job: its task group and tasks."""

    index: int
    group: str
    slots: tuple[TaskSlot, ...]
    cpus_per_task: int | None  # whole cores per task; None: a fraction
    millicores: int = 0  # each task's CPU
    memory: int = 0  # each task's memory (bytes)
    gpus: int = 0  # each task's whole GPUs


def components(
    groups: Sequence[str], slots: Sequence[TaskSlot], per_task: Mapping[str, Resources]
) -> list[Component]:
    """The components of a job whose task groups are ``groups`` (in order), started as
    ``slots``, each group's task needing ``per_task[group]``."""
    out: list[Component] = []
    for index, group in enumerate(groups):
        needs = per_task.get(group, Resources())
        millicores = needs.get(CPU, 0)
        whole = millicores // 1000 if millicores and millicores % 1000 == 0 else None
        own = tuple(s for s in slots if s.group == group)
        memory, gpus = needs.get(MEMORY, 0), needs.get(GPU, 0)
        out.append(Component(index, group, own, whole, millicores, memory, gpus))
    return out


def het_files(parts: Sequence[Component]) -> dict[str, str]:
    """Each component's hostfile (``<node> slots=<tasks>``), by file name."""
    return {het_hostfile_name(part.index): hostfile(part.slots) for part in parts}


def het_slurm_env(job: SlurmJob, parts: Sequence[Component]) -> dict[str, str]:
    """The variables of a heterogeneous job's batch script (module doc), over those of
    :func:`~fusesched.controller.launchenv.slurm_env`."""
    env = {HET_SIZE_ENV: str(len(parts)), PACK_SIZE_ENV: str(len(parts))}
    for part in parts:
        if not part.slots:
            continue
        suffix = f"{HET_SUFFIX}{part.index}"
        env.update(allocation_env(part.slots, suffix))
        env[f"SLURM_JOB_ID{suffix}"] = job.job_id  # (one job here: Slurm gives each its own)
        env[f"SLURM_JOB_NAME{suffix}"] = job.name
        env[f"SLURM_JOB_PARTITION{suffix}"] = job.queue
        env[f"SLURM_JOB_ACCOUNT{suffix}"] = job.account
        env[f"SLURM_JOB_QOS{suffix}"] = job.qos
        if part.millicores:
            env[f"SLURM_JOB_CPUS_PER_NODE{suffix}"] = _cpus_per_node(part)
        if part.cpus_per_task is not None:
            env[f"SLURM_CPUS_PER_TASK{suffix}"] = str(part.cpus_per_task)
        # (srun --het-group's tasks: what their components hold on their node; always said,
        # 0 included, so that a step tells this controller from an older one)
        env[f"{MEM_PER_TASK_ENV}{suffix}"] = str(part.memory)
        env[f"{GPUS_PER_TASK_ENV}{suffix}"] = str(part.gpus)
    return env


def _cpus_per_node(part: Component) -> str:
    """The whole CPUs the component holds on each of its nodes (a fraction rounded up), in
    Slurm's ``4(x2),2`` form."""
    tasks: dict[str, int] = {}
    for slot in part.slots:
        tasks[slot.node] = tasks.get(slot.node, 0) + 1
    return tasks_per_node([-(-n * part.millicores // 1000) for n in tasks.values()])


def stored_components(request: Mapping[str, object]) -> list[ComponentView] | None:
    """A heterogeneous job's components as its stored request (JSON) gives them (``fusesched
    show``, ``GET /v1/jobs/{id}``); None for a job that is not one."""
    groups = request.get("groups")
    if request.get("hetjob") is not True or not isinstance(groups, list):
        return None
    out: list[ComponentView] = []
    for group in groups:
        if not isinstance(group, Mapping):
            continue
        replicas = group.get("replicas", 1)
        resources = group.get("resources")
        out.append(
            ComponentView(
                name=str(group.get("name", "")),
                tasks=replicas if isinstance(replicas, int) else 1,
                resources={str(k): str(v) for k, v in resources.items()}
                if isinstance(resources, Mapping)
                else {},
                constraints=_constraints(group.get("placement")),
            )
        )
    return out


def _constraints(placement: object) -> str:
    """A component's own node constraints in a line (``pool=gpu, kubernetes.io/hostname In
    [n1]``); "" for none, or for what no longer reads as such."""
    if not isinstance(placement, Mapping):
        return ""
    try:
        model = GroupPlacementRequest.model_validate(placement).to_model()
    except ValidationError:
        return ""
    return "" if model is None else model.describe()
