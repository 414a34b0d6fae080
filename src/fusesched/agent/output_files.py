"""A batch task's output files (``sbatch -o/-e``, ``--open-mode``): its output goes to its log,
as every task's, and also to the files its job named.

The task writes into a pipe instead of its log; a ``tee`` reads the pipe and writes both the
log (its standard output, the log's own descriptor) and the file. ``tee`` runs as the task's
user (as the task: ``setpriv`` or ``subprocess``'s identity switch), so the file is opened
with that user's rights and never root's, and it opens it at the task's start: emptied first
(``--open-mode=truncate``, the default) or added to (``append``, ``tee -a``). With an error
file (``-e``) of its own, standard error has a pipe and a ``tee`` too; both write the log.

Each ``tee`` leads a session of its own, out of the task's process group: killing the task's
group at its end does not cut it off before it has copied all, and it ends at the pipe's end
of file, once every process of the task has closed it. :func:`finish` waits for that (briefly:
a process that left the task's group and lives on keeps the pipe open; its ``tee`` is then
stopped). A file that cannot be opened (a missing folder, no right to write) does not stop the
task: ``tee`` says so in the log and copies on, after a line of the agent's that says why
when the owners and modes tell (:func:`unwritable`: root's jobs, which never run as root,
cannot write in a folder only root may write).
"""

from __future__ import annotations

import contextlib
import os
import select
import shutil
import signal
import stat
import subprocess
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

from fusesched.agent.users import Identity
from fusesched.api.wire import TaskLaunch

#: Where ``tee`` is looked for (absolute paths, never the job's PATH).
TEE_DIRS = "/usr/bin:/bin"
#: How long the runtime waits, after a task's end, for its writers to copy what is left.
FINISH_WAIT_S = 5.0

Writer = subprocess.Popen[bytes]


class OutputFileError(Exception):
    """The output files cannot be written at all here (no ``tee``, no process)."""


@dataclass(slots=True)
class OutputWriters:
    """The writers of one task and the descriptors its process gets for its output."""

    stdout: int  # the write end of the pipe to the output file's writer
    stderr: int  # the write end of the error file's pipe, or ``subprocess.STDOUT``
    writers: list[Writer] = field(default_factory=list)
    # the agent's own write end of the error (else output) file's pipe, kept open until the
    # task's end for what the agent has to add then (:func:`say`), as slurmstepd's errors
    note: int = -1

    def close_task_ends(self) -> None:
        """Close the agent's copies of the write ends (once the task holds its own); twice
        closes nothing (the numbers may be another thread's by then)."""
        for fd in (self.stdout, self.stderr):
            if fd >= 0:
                with contextlib.suppress(OSError):
                    os.close(fd)
        self.stdout = self.stderr = -1


def start(
    launch: TaskLaunch, log_fd: int, who: Identity | None, setpriv: str | None
) -> OutputWriters | None:
    """Start the writers of ``launch``'s output files (None when it names none): each
    copies a pipe to the log (``log_fd``) and to its file, as ``who`` (None: as the agent),
    switching identity with ``setpriv`` when given. Raises :class:`OutputFileError`."""
    if launch.output_file is None:
        return None
    tee = shutil.which("tee", path=TEE_DIRS)
    if tee is None:
        raise OutputFileError("cannot write the output file: tee (coreutils) is not installed")
    paths = [launch.output_file]
    if launch.error_file is not None and launch.error_file != launch.output_file:
        paths.append(launch.error_file)
    ends: list[int] = []
    writers: list[Writer] = []
    try:
        for path in paths:
            if who is not None:
                _say_if_unwritable(path, who, log_fd)
            read, write = os.pipe()
            ends.append(write)
            try:
                writers.append(_writer(tee, path, launch.output_append, read, log_fd, who, setpriv))
            finally:
                os.close(read)
    except OSError as exc:
        for fd in ends:
            os.close(fd)
        finish(writers, 0.0)
        raise OutputFileError(f"cannot start the output file's writer: {exc}") from None
    stderr = ends[1] if len(ends) > 1 else subprocess.STDOUT
    return OutputWriters(ends[0], stderr, writers, os.dup(ends[-1]))


def say(note: int, log_path: Path, text: str) -> None:
    """Add the agent's ``text`` (a line) at the end of an ended task's error output: through
    ``note`` (:attr:`OutputWriters.note`) to its error file and log, else (-1: no output
    files, or a writer that takes nothing within :data:`SAY_WAIT_S`: stopped, or on a file
    system that hangs) to its log only. Never blocks for longer: the agent's loop waits."""
    data = f"{text}\n".encode(errors="replace")
    if note >= 0 and _write_within(note, data, SAY_WAIT_S):
        return
    with contextlib.suppress(OSError):
        _append_to_log(log_path, data)


#: How long :func:`say` waits for room in a writer's full pipe.
SAY_WAIT_S = 1.0


def _write_within(fd: int, data: bytes, wait_s: float) -> bool:
    """Write ``data`` (at most ``PIPE_BUF`` bytes: all or nothing) to the pipe ``fd`` once
    it has room, waiting at most ``wait_s``; whether it was written. The pipe's open file is
    the task's too: it stays blocking, and a pipe with room takes so short a write at once."""
    poller = select.poll()
    poller.register(fd, select.POLLOUT)
    try:
        ready = poller.poll(int(wait_s * 1000))
        if not ready or not ready[0][1] & select.POLLOUT:
            return False  # (full, or its reader gone: POLLERR)
        return os.write(fd, data) == len(data)
    except OSError:
        return False


def _append_to_log(log_path: Path, data: bytes) -> None:
    """Append ``data`` to a task's log as the agent (root). The log lies in the task user's
    folder: a link or a FIFO put in its place is refused (``OSError``), never followed or
    waited on (as :func:`fusesched.agent.task_files.open_task_file`)."""
    flags = os.O_WRONLY | os.O_APPEND | os.O_NOFOLLOW | os.O_NONBLOCK
    fd = os.open(log_path, flags)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError(f"{log_path} is not a regular file")
        os.write(fd, data)
    finally:
        os.close(fd)


def oom_message(launch: TaskLaunch, kills: int) -> str:
    """What the agent adds to the error output of a task whose cgroup's OOM killer killed
    ``kills`` processes, worded as slurmstepd's (what users and their scripts look for)."""
    step = launch.env.get("SLURM_STEP_ID")
    if step is None:
        step = "batch" if launch.script is not None else None
    where = f"StepId={launch.job_id}.{step}" if step is not None else f"task {launch.task_id}"
    return (
        f"fusesched: error: Detected {kills} oom-kill event(s) in {where} cgroup. Some of "
        "your processes may have been killed by the cgroup out-of-memory handler."
    )


#: What a stop's reason says of why, as slurmstepd's line ends (``DUE TO TIME LIMIT``): by
#: the reason's start (the agent's own time limit, the controller's cancel, preemption and
#: requeue reasons: ``runtime.REASON_WALLTIME``, ``core.intake.TIME_LIMIT_PASSED``,
#: ``"cancelled by user"``, ``core.tenants``' ``"preempted for job …"``, ``"requeued by
#: user"``). Other stops (a failed liveness probe, the agent's shutdown, a gang member's
#: failure) are not Slurm's cancels: no line.
STOP_CAUSES: Final = (
    ("walltime exceeded", " DUE TO TIME LIMIT"),
    ("cancelled", ""),
    ("preempted", " DUE TO PREEMPTION"),
    ("requeued", " DUE TO JOB REQUEUE"),
)


def stop_message(launch: TaskLaunch, reason: str, at: float) -> str | None:
    """What the agent adds to a batch script's error output when it stops the script at its
    time limit or on the controller's cancel, preemption or requeue, worded as slurmstepd's
    (``*** JOB 11 ON node-1 CANCELLED AT 2026-12-07T13:03:57 DUE TO TIME LIMIT ***``, what
    users look for in a job's output to learn why it ended). ``at``: the wall-clock time of
    the stop. None for other tasks and other stops."""
    if launch.script is None:
        return None
    cause = next((tail for head, tail in STOP_CAUSES if reason.startswith(head)), None)
    if cause is None:
        return None
    node = launch.env.get("SLURMD_NODENAME") or launch.env.get("FUSESCHED_NODE") or "?"
    when = time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(at))
    return f"fusesched: error: *** JOB {launch.job_id} ON {node} CANCELLED AT {when}{cause} ***"


def close_note(note: int) -> None:
    """Close the agent's write end (-1: none): the writer then reaches its end of file."""
    if note >= 0:
        with contextlib.suppress(OSError):
            os.close(note)


def unwritable(path: str, who: Identity) -> str | None:
    """Why ``who`` may not write ``path`` (the file, or the folder it would be made in),
    read from their owners and modes (ACLs and network file systems may decide otherwise:
    a hint, not a verdict); None when it may, or when there is nothing to look at."""
    target = path
    try:
        st = os.stat(path)
    except FileNotFoundError:
        target = os.path.dirname(path) or "/"
        try:
            st = os.stat(target)
        except OSError:
            return None  # (a missing folder: tee says so itself)
    except OSError:
        return None
    if st.st_uid == who.uid:
        allowed = st.st_mode & stat.S_IWUSR
    elif st.st_gid in who.groups:
        allowed = st.st_mode & stat.S_IWGRP
    else:
        allowed = st.st_mode & stat.S_IWOTH
    if allowed:
        return None
    whose = (
        "root's jobs run as an unprivileged uid of their own, never as root"
        if who.name == "root"
        else f"user {who.name}'s"
    )
    return (
        f"fusesched: the output file {path} cannot be written: the task runs as uid "
        f"{who.uid} ({whose}), which may not write {target} (owner uid {st.st_uid}, mode "
        f"{stat.S_IMODE(st.st_mode):o}); the output is in the job's log only (fusesched logs)"
    )


def _say_if_unwritable(path: str, who: Identity, log_fd: int) -> None:
    """Put :func:`unwritable`'s reason at the top of the task's log (tee's own complaint,
    "Permission denied", follows it)."""
    why = unwritable(path, who)
    if why is not None:
        with contextlib.suppress(OSError):
            os.write(log_fd, f"{why}\n".encode(errors="replace"))


def _writer(
    tee: str,
    path: str,
    append: bool,
    read: int,
    log_fd: int,
    who: Identity | None,
    setpriv: str | None,
) -> Writer:
    argv = [tee, *(["-a"] if append else []), "--", path]
    env = {"PATH": TEE_DIRS, "LANG": "C.UTF-8"}
    switch = who
    if who is not None and setpriv is not None:  # (spawned by vfork: no fork of the agent)
        ids = [f"--reuid={who.uid}", f"--regid={who.gid}", "--clear-groups"]
        argv = [setpriv, *ids, "--", *argv]
        switch = None
    return subprocess.Popen(
        argv,
        stdin=read,
        stdout=log_fd,
        stderr=log_fd,  # (its complaints, such as a folder that does not exist: in the log)
        cwd="/",
        env=env,
        start_new_session=True,  # out of the task's group: its end does not cut the copy
        user=switch.uid if switch is not None else None,
        group=switch.gid if switch is not None else None,
        extra_groups=[] if switch is not None else None,
    )


def finish(writers: Sequence[Writer], wait_s: float = FINISH_WAIT_S) -> None:
    """Wait up to ``wait_s`` (in all) for ``writers`` to copy what is left and end (the
    task has ended: their pipes reach their end once its processes are gone), then stop
    those still running (a process of the task's that left its group keeps a pipe open)."""
    deadline = time.monotonic() + wait_s
    for writer in writers:
        try:
            writer.wait(timeout=max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(writer.pid, signal.SIGKILL)
            writer.wait()
