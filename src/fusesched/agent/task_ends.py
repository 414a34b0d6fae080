"""What the runtime does once a task has ended: the cleanup after it, and its exit report.

Once a task's main process has exited, :class:`~fusesched.agent.runtime.ProcessRuntime` reaps
it; :func:`release` then closes what the task held (its pidfd; its memory cgroup, whose OOM
kills are counted and said in the task's log; its note and output files) and
:func:`exit_report` says how it ended (a container's status for a signal as ``-N``; bwrap's own
message when it could not set the container up). A task cgroup that cannot be removed yet is
retried later (:func:`retire`). :func:`kill_orphans` ends what an earlier agent with the same
work dir left running.
"""

from __future__ import annotations

import contextlib
import os
import signal
from collections.abc import Callable
from pathlib import Path

from fusesched.agent import output_files
from fusesched.agent.cgroups import MemoryCgroups, TaskCgroup
from fusesched.agent.task_files import read_pid_file
from fusesched.agent.task_logs import bwrap_error
from fusesched.agent.task_process import PID_NAME, TaskProcess, start_time
from fusesched.api.wire import TaskReport, TaskState
from fusesched.model.phases import OOM_REASON


def retire(cgroup: TaskCgroup) -> bool:
    """Kill what is left in ``cgroup`` and remove it; False when it cannot be removed yet."""
    cgroup.kill_all()
    try:
        return cgroup.remove()
    except OSError:
        return False


def kill_orphans(
    work_dir: Path, memory_cgroups: MemoryCgroups, cgroup_name: Callable[[str], str]
) -> list[str]:
    """Kill what an earlier agent with this work dir left running; the task ids.

    The controller treats a restarted agent's tasks as gone, so they must be: each task
    folder holds ``pid`` ("<pid> <start time>"); a group whose leader is alive with that
    start time, or dead (its pid cannot be reused while its group exists), is SIGKILLed.
    ``cgroup_name``: the name of a task's memory cgroup from its id.
    """
    killed = []
    for pid_file in sorted((work_dir / "tasks").glob(f"*/{PID_NAME}")):
        try:
            pid, start = read_pid_file(pid_file)
        except (OSError, ValueError):
            continue
        now_start = start_time(pid)
        if now_start is None or now_start == start:
            try:
                os.killpg(pid, signal.SIGKILL)
                killed.append(pid_file.parent.name)
            except (ProcessLookupError, PermissionError):
                pass
        if memory_cgroups.parent is not None:
            name = cgroup_name(pid_file.parent.name)
            retire(TaskCgroup(memory_cgroups.parent / name))
        with contextlib.suppress(OSError):
            pid_file.unlink()
    return killed


def release(task: TaskProcess, stale_cgroups: list[TaskCgroup]) -> int:
    """Close what the reaped ``task`` held: its pidfd, its cgroup (added to ``stale_cgroups``
    when it cannot be removed yet), its note (the OOM killer's kills said in it first) and its
    output files' writers. The number of OOM kills in its cgroup."""
    if task.pidfd is not None:
        os.close(task.pidfd)
        task.pidfd = None
    oom = 0
    if task.cgroup is not None:
        oom = task.cgroup.oom_kills()
        if not retire(task.cgroup):
            stale_cgroups.append(task.cgroup)
    if oom:
        output_files.say(task.note, task.log_path, output_files.oom_message(task.launch, oom))
    output_files.close_note(task.note)
    output_files.finish(task.writers)  # (what its output files' writers have left to copy)
    return oom


def exit_report(task: TaskProcess, code: int, oom: int) -> TaskReport:
    """How the reaped ``task`` ended: its exit status ``code`` and the OOM kills ``oom`` in
    its cgroup (:func:`release`)."""
    state = TaskState.EXITED
    reason = task.kill_reason or (OOM_REASON if oom else "")
    if task.container and reason and 128 < code <= 128 + 64:
        code = 128 - code  # bwrap exits 128+N for a command killed by signal N: say -N
    if task.container and code == 1 and not reason:
        setup_error = bwrap_error(task.log_path)
        if setup_error:
            state, reason = TaskState.FAILED_TO_START, f"container: {setup_error}"
    return TaskReport(
        task_id=task.launch.task_id,
        state=state,
        exit_code=None if state is TaskState.FAILED_TO_START else code,
        reason=reason,
        pid=task.pid,
        liveness_failed=task.liveness_failed,
    )
