"""A batch script's warning signal goes to its job steps, as Slurm's ``sbatch --signal``.

Slurm sends ``--signal=SIG@SECONDS`` to every job step running at that time and not to the
batch script's shell (that is what ``B:`` asks for). So a script that runs
``srun python train.py`` with ``#SBATCH --signal=USR2@90`` has python warned, while the shell
that waits for srun goes on (an untrapped USR2 would kill it, and the job with it: submitit's
requeue-on-timeout relies on this).

A batch script's own launch therefore carries the warning only with ``B:``
(:func:`fusesched.controller.signals.launch_signal`,
:func:`fusesched.submit.launch_mode.warning_to_steps`); without it the controller sends the
signal itself (:func:`check`, from the scheduling loop, once a second), its lead before the
job's time limit (its limit now, counted from the start of the run: a restart in place is a new
run), once per run and step task, to the job's step tasks (remote tasks: ``srun``'s, and the
ranks an ``mpirun`` in the script starts) started by then, through their agents' heartbeat
replies as ``scancel --signal`` does: one still launching then is warned once it runs, one on
a node whose signal queue is full at the next look. A step started after that gets none (nor
does Slurm's). Jobs without a script (a YAML job, ``fusesched run``,
an ``mpirun`` launcher job) keep the warning in their tasks' launches, for their agents to send.

After a controller restart a warning that was due while it was down is sent once the job is
adopted; one sent shortly before the restart may be sent again.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Final

from fusesched.api.wire import TaskSignal
from fusesched.controller.signals import MAX_QUEUED
from fusesched.model.phases import JobPhase
from fusesched.submit.launch_mode import warning_to_steps

if TYPE_CHECKING:
    from fusesched.controller.records import LiveJob
    from fusesched.controller.service import Controller
    from fusesched.core.records import JobRecord


#: How often the controller looks for warnings due (seconds): the lead is whole seconds.
CHECK_EVERY_S: Final = 1.0


def check(ctl: Controller, now_s: float | None = None) -> list[str]:
    """Send the warnings now due to the steps of the jobs whose warning goes to their steps,
    looking at most once every :data:`CHECK_EVERY_S` (``now_s``: monotonic seconds, for
    tests); the ids of the jobs warned."""
    now_s = time.monotonic() if now_s is None else now_s
    if now_s - ctl.step_warnings_at < CHECK_EVERY_S:  # (most calls: no lock taken)
        return []
    ctl.step_warnings_at = now_s
    warned: list[str] = []
    with ctl.work:
        now = ctl.clock()
        for live in ctl.jobs.values():
            if live.request.signal is not None and _send_due(ctl, live, now):
                warned.append(live.id)
        if warned:
            ctl.work.notify_all()  # the long polls of their nodes answer now
    return warned


def _run_start(live: LiveJob, rec: JobRecord) -> float | None:
    """When the job's current run started: its batch task's start (a restart in place starts
    a new run with new tasks), else the core's start."""
    starts = [t.start_time for t in live.tasks.values() if not t.remote and t.start_time]
    return max(starts) if starts else rec.start_time


def _send_due(ctl: Controller, live: LiveJob, now: float) -> bool:
    """Queue the warning, once due, for each step task of ``live``'s current run that was
    started by then and is running, once per task; whether any was queued now."""
    warning = live.request.signal
    rec = ctl.core.jobs.get(live.id)
    if warning is None or rec is None or rec.phase is not JobPhase.RUNNING:
        return False
    if live.adopting or live.pool is not None or live.stopping is not None:
        return False
    start, limit = _run_start(live, rec), rec.spec.walltime_s
    if start is None or limit is None or not warning_to_steps(live.request):
        return False
    due = start + limit - warning.before_s
    if now < due:
        return False
    if live.step_warned is None or live.step_warned[0] != start:
        live.step_warned = (start, set())  # (a new run: none of its steps warned yet)
    done = live.step_warned[1]
    sent = False
    for task in live.tasks.values():
        task_id = task.launch.task_id
        if not task.remote or task_id in done or task.state not in ("delivered", "running"):
            continue  # (one still launching is warned once it runs)
        if task.start_time is not None and task.start_time > due:
            continue  # (a step started after the warning gets none, as in Slurm)
        node = ctl.nodes.get(task.node)
        if node is None or not node.takes_signals:
            done.add(task_id)  # (an agent too old for signals: never)
            continue
        if len(node.signals) >= MAX_QUEUED:
            continue  # (its node's queue is full: tried again at the next look)
        signal = TaskSignal(task_id=task_id, signal=warning.name, main_only=False)
        if signal not in node.signals:
            node.signals.append(signal)
        done.add(task_id)
        sent = True
    return sent
