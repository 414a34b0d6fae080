"""The signals the runtime sends a running task besides those that stop it.

One asked for by name (``USR1``: ``fusesched signal``), to the task's process group or its main
process alone (:func:`send_signal`), and the launch's warning signal, its lead before the time
limit, once (:func:`warn`, ``TaskLaunch.signal``). A signal a job may not be sent
(:func:`~fusesched.submit.job_signal.signal_number`'s refusal) is not sent, and logged.
"""

from __future__ import annotations

import logging

from fusesched.agent.task_process import TaskProcess
from fusesched.submit.job_signal import signal_number

log = logging.getLogger("fusesched.agent.runtime")  # the runtime's logger: the runtime sends them


def send_signal(task: TaskProcess | None, task_id: str, name: str, main_only: bool) -> bool:
    """Send ``task`` (``task_id``'s, ``None`` when it is not running) signal ``name`` now: its
    process group, or its main process alone. False (and nothing sent) for a task not
    running, one being stopped, or an unknown signal."""
    signum = _signum(name)
    if task is None or task.kill_reason is not None or signum is None:
        log.info("signal %s for task %s not sent: it is not running", name, task_id)
        return False
    task.send(signum, main_only)
    return True


def warn(task: TaskProcess) -> None:
    """Send the launch's signal before the time limit (once)."""
    task.warned = True
    warning = task.launch.signal
    signum = None if warning is None else _signum(warning.name)
    if warning is not None and signum is not None:
        log.info(
            "task %s: SIG%s, %g s before its time limit",
            task.launch.task_id,
            warning.name,
            warning.before_s,
        )
        task.send(signum, warning.main_only)


def _signum(name: str) -> int | None:
    """A signal's number from its name (``USR1``); None (logged) for one a job may not be
    sent (:func:`~fusesched.submit.job_signal.signal_number`'s refusal)."""
    try:
        return signal_number(name)
    except ValueError as exc:
        log.warning("signal %r not sent: %s", name, exc)
        return None
