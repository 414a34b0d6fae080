"""The environment a task starts with: a minimal base, the job's variables (the task folder's
placeholder filled in), and fusesched's own (its ids, folder, CPUs, GPUs, checkpoint folder,
memory limit). Nothing of the agent's own environment reaches it."""

from __future__ import annotations

import os
from collections.abc import Sequence

from fusesched.agent.users import Identity
from fusesched.agent.watching import CHECKPOINT_ENV, checkpoint_env
from fusesched.api.wire import TASK_DIR_PLACEHOLDER, TaskLaunch

DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


def cpu_list(cpus: Sequence[int]) -> str:
    """CPU ids as ``FUSESCHED_CPU_IDS`` (and messages) write them: sorted, comma-separated."""
    return ",".join(str(cpu) for cpu in sorted(cpus))


def cuda_visible_devices(launch: TaskLaunch) -> str:
    """``CUDA_VISIBLE_DEVICES`` for a launch: the UUIDs if any (MIG), else the indices.

    Empty when the task has no GPUs, so it cannot use GPUs given to other tasks.
    """
    if launch.gpu_uuids:
        return ",".join(launch.gpu_uuids)
    return ",".join(str(index) for index in launch.gpu_indices)


def task_environment(
    launch: TaskLaunch, task_dir: str, memory_limit: int | None, tmp_dir: str | None = None
) -> dict[str, str]:
    """The environment of ``launch``'s task, its folder ``task_dir`` as the task sees it."""
    # (SHELL: OpenMPI's launcher asks it, else warns "local probe returned unhandled shell")
    env = {"PATH": DEFAULT_PATH, "HOME": task_dir, "LANG": "C.UTF-8", "SHELL": "/bin/sh"}
    if tmp_dir is not None:
        env["TMPDIR"] = tmp_dir
    env.update({k: v.replace(TASK_DIR_PLACEHOLDER, task_dir) for k, v in launch.env.items()})
    env.update(
        {
            "FUSESCHED_TASK_ID": launch.task_id,
            "FUSESCHED_JOB_ID": launch.job_id,
            "FUSESCHED_TASK_DIR": task_dir,
            "FUSESCHED_CPU_IDS": cpu_list(launch.cpu_ids),
            "FUSESCHED_GPU_INDICES": ",".join(str(i) for i in launch.gpu_indices),
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
