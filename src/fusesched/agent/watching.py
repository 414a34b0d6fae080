"""What the agent's sensors watch for a task the runtime started, and its checkpoint folder.

Each task has a checkpoint folder: the launch's ``checkpoint_dir`` (relative: to the task's
folder), else ``<task dir>/checkpoints``. The runtime creates it, gives it to the task's user
and names it in ``FUSESCHED_CHECKPOINT_DIR``; the sensors take its newest file as the task's
latest checkpoint (see :mod:`fusesched.agent.sensors`).
"""

from __future__ import annotations

import os
from pathlib import Path

from fusesched.agent.cgroups import TaskCgroup
from fusesched.agent.sensors import TaskWatch
from fusesched.agent.users import Identity, check_reachable, run_as
from fusesched.api.wire import TaskLaunch

CHECKPOINT_DIR_NAME = "checkpoints"
CHECKPOINT_ENV = "FUSESCHED_CHECKPOINT_DIR"


def checkpoint_dir(launch: TaskLaunch, task_dir: Path) -> Path:
    """The task's checkpoint folder on this node."""
    return task_dir / (launch.checkpoint_dir or CHECKPOINT_DIR_NAME)


def checkpoint_env(launch: TaskLaunch, inside: str) -> str:
    """``FUSESCHED_CHECKPOINT_DIR`` as the task sees it (``inside``: its folder as it sees it).

    A container task sees an absolute folder outside its task folder only where the agent's
    ``container_binds`` mount it.
    """
    return str(Path(inside) / (launch.checkpoint_dir or CHECKPOINT_DIR_NAME))


def prepare_checkpoint_dir(path: Path, who: Identity | None, task_dir: Path) -> None:
    """Create the folder (kept when it exists: a restarted job resumes from it) so that
    ``who`` can use it; raises ``OSError`` or ``IdentityError`` when it cannot be made usable.

    The agent runs as root and the path is the job's choice, so for a task under another
    identity root never creates or hands over anything outside the task's own folder: a folder
    elsewhere is created by ``mkdir -p`` running as ``who`` (where ``who`` may create it, as
    anywhere else). Inside the task folder it is created while that folder is still the
    agent's (call this before the folder is handed over), so nothing in it can be a link the
    task's user planted."""
    if who is None or _inside(path, task_dir):
        path.mkdir(parents=True, exist_ok=True)
        return
    done = run_as(who, ["/bin/mkdir", "-p", "--", str(path)], timeout=30)
    if done.returncode != 0:
        raise OSError(done.stderr.strip() or f"mkdir -p {path} failed as {who.name}")
    check_reachable(path, who)


def _inside(path: Path, folder: Path) -> bool:
    """Whether ``path`` names something within ``folder`` (lexically: ``..`` is resolved)."""
    normal = os.path.normpath(path)
    return normal.startswith(os.path.normpath(folder) + os.sep)


def task_watch(
    launch: TaskLaunch,
    pgid: int,
    cgroup: TaskCgroup | None,
    log_path: Path,
    checkpoints: Path | None,
) -> TaskWatch:
    """The sensors' view of a live task: its process group, cgroup, log, checkpoints, GPUs."""
    return TaskWatch(
        task_id=launch.task_id,
        pgid=pgid,
        cgroup_procs=None if cgroup is None else cgroup.path / "cgroup.procs",
        log_path=log_path,
        checkpoint_dir=checkpoints,
        gpu_indices=tuple(launch.gpu_indices),
    )
