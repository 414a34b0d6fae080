"""The environment a task starts with: a minimal base, the job's variables (the task folder's
placeholder filled in), and fusesched's own (its ids, folder, CPUs, GPUs, checkpoint folder,
memory limit). Nothing of the agent's own environment reaches it.

The GPUs a task sees are its own (the launch's ``gpu_indices``, or its MIG instances'
``gpu_uuids``), but for a batch script: as Slurm's batch step, it sees all of its job's whole
GPUs on its node, which the controller names in the launch's :data:`BATCH_GPUS_ENV`
(controller/run_launches.py) while the launch's ``gpu_indices`` stay the task's own (what the
controller books, adopts, meters and caps). That mark is the controller's word to the agent,
not the task's: it is not left in the task's environment. An agent older than it leaves it
there and shows the task its own GPUs only, as before.
"""

from __future__ import annotations

import os
from collections.abc import Sequence

from fusesched.agent.users import Identity
from fusesched.agent.watching import CHECKPOINT_ENV, checkpoint_env
from fusesched.api.wire import BATCH_GPUS_ENV, TASK_DIR_PLACEHOLDER, TaskLaunch

DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


def cpu_list(cpus: Sequence[int]) -> str:
    """CPU ids as ``FUSESCHED_CPU_IDS`` (and messages) write them: sorted, comma-separated."""
    return ",".join(str(cpu) for cpu in sorted(cpus))


def visible_gpus(launch: TaskLaunch) -> list[int]:
    """The indices of the GPUs ``launch``'s task sees: its own (``gpu_indices``), and for a
    batch script of whole GPUs those :data:`BATCH_GPUS_ENV` names too (sorted); its own
    alone for MIG instances (``gpu_uuids``) or a mark that does not read as indices."""
    own = list(launch.gpu_indices)
    text = launch.env.get(BATCH_GPUS_ENV)
    if launch.gpu_uuids or not text:
        return own
    parts = text.split(",")
    if not all(p.isascii() and p.isdigit() and len(p) <= 6 for p in parts):
        return own
    return sorted(set(own) | {int(p) for p in parts})


def cuda_visible_devices(launch: TaskLaunch) -> str:
    """``CUDA_VISIBLE_DEVICES`` for a launch: the UUIDs if any (MIG), else the indices
    (a batch script's: :func:`visible_gpus`).

    Empty when the task has no GPUs, so it cannot use GPUs given to other tasks.
    """
    if launch.gpu_uuids:
        return ",".join(launch.gpu_uuids)
    return ",".join(str(index) for index in visible_gpus(launch))


def task_environment(
    launch: TaskLaunch, task_dir: str, memory_limit: int | None, tmp_dir: str | None = None
) -> dict[str, str]:
    """The environment of ``launch``'s task, its folder ``task_dir`` as the task sees it."""
    # (SHELL: OpenMPI's launcher asks it, else warns "local probe returned unhandled shell")
    env = {"PATH": DEFAULT_PATH, "HOME": task_dir, "LANG": "C.UTF-8", "SHELL": "/bin/sh"}
    if tmp_dir is not None:
        env["TMPDIR"] = tmp_dir
    env.update(
        {
            k: v.replace(TASK_DIR_PLACEHOLDER, task_dir)
            for k, v in launch.env.items()
            if k != BATCH_GPUS_ENV  # (the controller's word to the agent)
        }
    )
    env.update(
        {
            "FUSESCHED_TASK_ID": launch.task_id,
            "FUSESCHED_JOB_ID": launch.job_id,
            "FUSESCHED_TASK_DIR": task_dir,
            "FUSESCHED_CPU_IDS": cpu_list(launch.cpu_ids),
            # (the indices CUDA_VISIBLE_DEVICES names, as a step's task's: the two agree)
            "FUSESCHED_GPU_INDICES": ",".join(str(i) for i in visible_gpus(launch)),
            "CUDA_VISIBLE_DEVICES": cuda_visible_devices(launch),
            CHECKPOINT_ENV: checkpoint_env(launch, task_dir),
        }
    )
    if memory_limit is not None:
        env["FUSESCHED_MEMORY_LIMIT_BYTES"] = str(memory_limit)
    return env


def slurm_identity_env(who: Identity | None) -> dict[str, str]:
    """What a task with Slurm's variables is told of the identity it runs as, as Slurm's
    ``slurmstepd`` tells it: ``SLURM_JOB_UID`` and ``SLURM_JOB_GID``, and, when the agent
    switches to ``who`` (it runs as root), ``SLURM_JOB_USER`` its name (the job's user, or
    ``anonymous``); ``who`` None: the agent's own uid and gid (its tasks run as it), the
    controller's ``SLURM_JOB_USER`` (the job's user) kept."""
    if who is None:
        return {"SLURM_JOB_UID": str(os.getuid()), "SLURM_JOB_GID": str(os.getgid())}
    return {
        "SLURM_JOB_UID": str(who.uid),
        "SLURM_JOB_GID": str(who.gid),
        "SLURM_JOB_USER": who.name,
    }
