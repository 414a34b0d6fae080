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
import resource
import signal
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from fusesched.agent.cgroups import TaskCgroup
from fusesched.agent.probe_checks import ExecContext
from fusesched.agent.pty_bridge import Pty
from fusesched.api.wire import TaskLaunch

PID_NAME = "pid"


@dataclass(frozen=True, slots=True)
class Usage:
    """What the kernel counted for a reaped task: its main process and every descendant
    that was reaped before it (a shell's commands): CPU time, and the largest resident set
    any one of them reached (when it can be told from the agent's own, see :meth:`reap`)."""

    cpu_seconds: float
    max_rss_bytes: int | None  # None: not above the agent's own peak, which it includes


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
    warned: bool = False  # the launch's signal before the time limit has been sent
    # the writers of its output files (sbatch -o/-e: agent/output_files.py), waited for at its end
    writers: list[subprocess.Popen[bytes]] = field(default_factory=list)
    # the agent's write end to its error file's writer (-1: none): output_files.say
    note: int = -1
    # how its exec probes run (None: as the agent, in its folder; agent/probes.py)
    probe_context: ExecContext | None = None
    liveness_failed: bool = False  # being stopped because its liveness probe failed
    # its pseudo-terminal (fusesched run --pty) until the runtime hands it to its relay
    pty: Pty | None = None

    @property
    def pid(self) -> int:
        return self.popen.pid

    @property
    def walltime_deadline(self) -> float | None:
        walltime = self.launch.walltime_s
        return None if walltime is None else self.started_at + walltime

    @property
    def warning_deadline(self) -> float | None:
        """When the launch's signal is due (its time limit less its lead); None: never."""
        warning = self.launch.signal
        deadline = self.walltime_deadline
        if warning is None or deadline is None or self.warned:
            return None
        return deadline - warning.before_s

    def send(self, signum: int, main_only: bool = False) -> None:
        """Signal the task's process group (``main_only``: its main process); it goes on
        running unless the signal ends it. In a container, the main process is the command
        bwrap started, not bwrap itself."""
        if not self.container:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                if main_only:
                    os.kill(self.pid, signum)
                else:
                    os.killpg(self.pid, signum)
            return
        members = [pid for pid in group_members(self.pid) if pid != self.pid]
        if main_only:  # bwrap (the leader) → its PID 1 reaper → the command
            reapers = {pid for pid in members if parent_of(pid) == self.pid}
            members = sorted(pid for pid in members if parent_of(pid) in reapers)[:1]
        for pid in members:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signum)

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

    def reap(self) -> tuple[int, Usage | None]:
        """Reap the exited main process: (its exit code as ``Popen.returncode`` gives it, what
        the kernel counted for it and its reaped descendants; None when it was reaped
        elsewhere)."""
        try:
            _, status, rusage = os.wait4(self.pid, 0)
        except ChildProcessError:  # reaped elsewhere (Popen.poll): no usage to read
            return self.popen.wait(), None
        self.popen.returncode = os.waitstatus_to_exitcode(status)
        # Linux counts in KiB. The peak of the process that forked the task (this agent) is
        # in it too: exec records the replaced memory's high-water mark. A peak no higher
        # than the agent's own says nothing about the task.
        peak = rusage.ru_maxrss * 1024
        inherited = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
        usage = Usage(
            cpu_seconds=rusage.ru_utime + rusage.ru_stime,
            max_rss_bytes=peak if peak > inherited else None,
        )
        return self.popen.returncode, usage

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


def parent_of(pid: int) -> int | None:
    """The parent's pid of process ``pid`` (None: it is gone)."""
    try:
        with open(f"/proc/{pid}/stat") as handle:
            return int(handle.read().rsplit(")", 1)[1].split()[1])
    except (OSError, IndexError, ValueError):
        return None


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
