"""What a stored job request asks for in all, as ``squeue`` shows it (``%C`` CPUs, ``%b`` GPUs,
``%D`` nodes): read from the request's JSON, so an odd or older request gives ``None``."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import NamedTuple

from fusesched.model.resources import GPU, GPU_MILLI, QuantityError, parse_quantity


class JobSize(NamedTuple):
    cpus: float | None  # CPU cores of all its tasks
    gpus: int | None  # whole GPUs (nvidia.com/gpu) of all its tasks
    min_nodes: int | None  # the fewest nodes it can run on
    # every accelerator of all its tasks by resource name: whole GPUs, MIG slices
    # (nvidia.com/mig-1g.10gb), GPU shares (fusesched.io/gpu-milli), other vendors' */gpu
    accelerators: dict[str, int] | None = None
    # each task's CPU cores, when every task group asks the same (what a job step's task
    # holds: sacct's step AllocCPUS); None: they differ, or unknown
    cpus_per_task: float | None = None


UNKNOWN = JobSize(None, None, None, None)


def is_accelerator(name: str) -> bool:
    """Whether the resource ``name`` is a GPU or a part of one."""
    return name in (GPU, GPU_MILLI) or name.startswith("nvidia.com/mig-") or name.endswith("/gpu")


def job_size(request: Mapping[str, object]) -> JobSize:
    """The totals of ``request`` (a :class:`~fusesched.submit.request.JobRequest` as JSON)."""
    groups = request.get("groups")
    if not isinstance(groups, list):
        return UNKNOWN
    millicores = tasks = 0
    each: set[int] = set()  # (the groups' millicores per task)
    accelerators: dict[str, int] = {}
    try:
        for group in groups:
            if not isinstance(group, Mapping):
                return UNKNOWN
            replicas = group.get("replicas", 1)
            resources = group.get("resources")
            if not isinstance(replicas, int) or not isinstance(resources, Mapping):
                return UNKNOWN
            tasks += replicas
            per_task = parse_quantity("cpu", resources.get("cpu", 0))
            each.add(per_task)
            millicores += replicas * per_task
            for name, amount in resources.items():
                if isinstance(name, str) and is_accelerator(name):
                    count = replicas * parse_quantity(name, amount)
                    if count:
                        accelerators[name] = accelerators.get(name, 0) + count
    except (QuantityError, ValueError, TypeError):
        return UNKNOWN
    placement = request.get("placement")
    per_node = placement.get("max_tasks_per_node") if isinstance(placement, Mapping) else None
    spread = isinstance(per_node, int) and per_node > 0
    min_nodes = math.ceil(tasks / per_node) if spread and isinstance(per_node, int) else 1
    exact = placement.get("nodes") if isinstance(placement, Mapping) else None
    if isinstance(exact, int) and exact > 0:  # exactly so many (sbatch -N 2 -n 4)
        min_nodes = exact
    return JobSize(
        millicores / 1000,
        accelerators.get(GPU, 0),
        max(min_nodes, 1),
        dict(sorted(accelerators.items())),
        each.pop() / 1000 if len(each) == 1 else None,
    )


def batch_started(request: Mapping[str, object]) -> bool:
    """Whether one task starts the job and launches the rest (its batch script, or mpirun
    for an MPI group), as sbatch does: ``submit/launch_mode.py``'s ``batch_mode``, read from
    the stored JSON. That task is what ``sacct`` shows as the job's ``ID.batch`` step. A
    heterogeneous job's script runs on its first component's first task."""
    if request.get("hetjob") is True:
        return True
    groups = request.get("groups")
    if not isinstance(groups, list) or len(groups) != 1 or not isinstance(groups[0], Mapping):
        return False
    return groups[0].get("script") is not None or groups[0].get("launcher") == "mpi"
