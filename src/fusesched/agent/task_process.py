"""A started task's process group, as the runtime tracks it: signals, exit, pid file, pidfd.

The task's first process leads its own process group (it is started in a new session), so the
group id is its pid. :class:`TaskProcess` holds what the runtime keeps about a started task
(its launch, process, folder, cgroup, kill state) and signals its group; the helpers read the
``/proc`` facts the runtime needs. Each task folder holds a pid file (:data:`PID_NAME`,
"<pid> <start time>") so that a restarted agent can find and kill what it left running.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from fusesched.agent.cgroups import TaskCgroup
from fusesched.api.wire import TaskLaunch

PID_NAME = "pid"


@dataclass
class TaskProcess:
    """A task the runtime started and has not yet reported as ended."""

    launch: TaskLaunch
    popen: subprocess.Popen[bytes]
    task_dir: Path
    log_path: Path
    started_at: float
    container: bool
    cgroup: TaskCgroup | None
    checkpoint_dir: Path | None  # None: not watched (another user's folder)
    notes: list[str] = field(default_factory=list)
    pidfd: int | None = None  # readable once the task's process has exited
    kill_reason: str | None = None
    kill_deadline: float | None = None
    sigkill_sent: bool = False

    @property
    def pid(self) -> int:
        return self.popen.pid

    @property
    def walltime_deadline(self) -> float | None:
        walltime = self.launch.walltime_s
        return None if walltime is None else self.started_at + walltime

    def sigterm(self) -> None:
        if self.container:
            # bwrap's outer process (the group leader) would die at once and take the sandbox
            # with it; signal everything else in the group so the command can exit cleanly.
            for pid in group_members(self.pid):
                if pid != self.pid:
                    with contextlib.suppress(ProcessLookupError, PermissionError):
                        os.kill(pid, signal.SIGTERM)
            return
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.pid, signal.SIGTERM)

    def sigkill(self) -> None:
        self.sigkill_sent = True
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.pid, signal.SIGKILL)
        if self.cgroup is not None:
            self.cgroup.kill_all()

    def has_exited(self) -> bool:
        try:
            return os.waitid(os.P_PID, self.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None
        except ChildProcessError:  # reaped elsewhere
            return self.popen.poll() is not None


def group_members(pgid: int) -> list[int]:
    members = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            with contextlib.suppress(OSError):
                if os.getpgid(int(entry)) == pgid:
                    members.append(int(entry))
    return members


def open_pidfd(pid: int) -> int | None:
    """A pidfd for the (child) process ``pid``: readable once it has exited; ``None`` where
    the kernel has no ``pidfd_open`` (before Linux 5.3)."""
    try:
        return os.pidfd_open(pid)
    except (AttributeError, OSError):
        return None


def start_time(pid: int) -> int | None:
    """The process's start time (clock ticks after boot), ``None`` if it does not exist."""
    try:
        with open(f"/proc/{pid}/stat") as handle:
            return int(handle.read().rsplit(")", 1)[1].split()[19])
    except (OSError, IndexError, ValueError):
        return None
