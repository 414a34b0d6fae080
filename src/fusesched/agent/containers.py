"""Unprivileged containers with bubblewrap (``bwrap``): the argv that wraps a task's command.

What a container task gets (see docs/AGENT.md for why bubblewrap rather than charliecloud):

* its own mount namespace: the image's root filesystem, read-only (a cached image is shared by
  every task that uses it), a fresh ``/proc``, a minimal ``/dev``, a private tmpfs ``/tmp``;
* its own PID namespace: it sees only its own processes (bwrap's small reaper is PID 1, the
  command PID 2);
* a user namespace only when the agent is not root (bwrap maps the agent's user);
* the host's network, IPC namespace and ``/dev/shm`` (MPI and NCCL use the fabric and shared
  memory between ranks at full speed), the host's ``/etc/hosts`` and ``/etc/resolv.conf``
  where the image has those files, and the NVIDIA device nodes when the task has GPUs;
* the task's folder (script, outputs) at :data:`TASK_DIR_IN_CONTAINER`, plus any extra binds.

No ``--die-with-parent``: Linux sends that signal when the *thread* that started the task ends,
which would kill tasks started from a short-lived thread. Tasks outlive an agent crash instead,
bare or contained alike, and the next agent on the same work dir kills them at its start.
"""

from __future__ import annotations

import glob
import os
import shutil
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

TASK_DIR_IN_CONTAINER = "/tmp/fusesched-task"
_HOST_FILES = ("/etc/hosts", "/etc/resolv.conf")


@dataclass(frozen=True, slots=True)
class Bind:
    """``src`` on the host appears at ``dst`` in the container."""

    src: Path
    dst: str
    read_only: bool = True


def find_bwrap() -> str | None:
    """The bubblewrap executable, if installed."""
    return shutil.which("bwrap")


def nvidia_device_nodes() -> list[str]:
    """The host's NVIDIA device nodes (GPUs, control, UVM, MIG capabilities)."""
    found = glob.glob("/dev/nvidia*") + glob.glob("/dev/nvidia-caps/*")
    return sorted(path for path in found if not os.path.isdir(path))


def bwrap_argv(
    rootfs: Path,
    command: Sequence[str],
    *,
    task_dir: Path,
    workdir: str | None = None,
    binds: Sequence[Bind] = (),
    gpus: bool = False,
    bwrap: str = "bwrap",
    unshare_user: bool | None = None,
) -> list[str]:
    """The full argv: ``bwrap <options> -- <command>``.

    ``workdir`` is a path inside the container (default: the task folder). ``unshare_user``
    defaults to "when not root". Bind destinations outside ``/tmp`` must exist in the image
    (its root is read-only); bwrap reports a missing one and the task fails to start.
    """
    if unshare_user is None:
        unshare_user = os.geteuid() != 0
    argv = [bwrap, "--unshare-pid"]
    if unshare_user:
        argv.append("--unshare-user")
    argv += ["--ro-bind", str(rootfs), "/"]
    argv += ["--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp"]
    if os.path.isdir("/dev/shm"):
        argv += ["--bind", "/dev/shm", "/dev/shm"]
    for host_file in _HOST_FILES:
        inside = rootfs / host_file.lstrip("/")
        if os.path.exists(host_file) and inside.is_file() and not inside.is_symlink():
            argv += ["--ro-bind", host_file, host_file]
    if gpus:
        for node in nvidia_device_nodes():
            argv += ["--dev-bind", node, node]
    argv += ["--bind", str(task_dir), TASK_DIR_IN_CONTAINER]
    for bind in binds:
        argv += ["--ro-bind" if bind.read_only else "--bind", str(bind.src), bind.dst]
    argv += ["--chdir", workdir or TASK_DIR_IN_CONTAINER, "--", *command]
    return argv
