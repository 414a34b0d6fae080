"""A batch script's warning signal goes to its job steps, as Slurm's ``sbatch --signal``.

Slurm sends ``--signal=SIG@SECONDS`` to every job step running at that time and not to the
batch script's shell (that is what ``B:`` asks for). So a script that runs
``srun python train.py`` with ``#SBATCH --signal=USR2@90`` has python warned, while the shell
that waits for srun goes on (an untrapped USR2 would kill it, and the job with it: submitit's
requeue-on-timeout relies on this).

A batch script's own launch therefore carries the warning only with ``B:``
(:func:`fusesched.controller.signals.launch_signal`,
:func:`fusesched.submit.launch_mode.warning_to_steps`); without it the controller sends the
signal itself (:func:`check`, from the scheduling loop), its lead before the job's time limit
(its limit now, counted from the start of the run), once per run, to the job's step tasks
(remote tasks: ``srun``'s, and the ranks an ``mpirun`` in the script starts) that are running
then, through their agents' heartbeat replies as ``scancel --signal`` does. A step started
after that gets none (nor does Slurm's). Jobs without a script (a YAML job, ``fusesched run``,
an ``mpirun`` launcher job) keep the warning in their tasks' launches, for their agents to send.

After a controller restart a warning that was due while it was down is sent once the job is
adopted; one sent shortly before the restart may be sent again.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from fusesched.api.wire import TaskSignal
from fusesched.controller.signals import MAX_QUEUED
from fusesched.model.phases import JobPhase
from fusesched.submit.launch_mode import warning_to_steps

if TYPE_CHECKING:
    from fusesched.controller.records import LiveJob
    from fusesched.controller.service import Controller


def check(ctl: Controller) -> list[str]:
    """Send the warnings now due to the steps of the jobs whose warning goes to their steps;
    the ids of the jobs warned."""
    warned: list[str] = []
    with ctl.work:
        now = ctl.clock()
        for live in ctl.jobs.values():
            if _due(ctl, live, now) and _send(ctl, live):
                warned.append(live.id)
        if warned:
            ctl.work.notify_all()  # the long polls of their nodes answer now
    return warned


def _due(ctl: Controller, live: LiveJob, now: float) -> bool:
    warning = live.request.signal
    if (
        warning is None
        or live.adopting
        or live.pool is not None
        or not warning_to_steps(live.request)
    ):
        return False
    rec = ctl.core.jobs.get(live.id)
    if rec is None or rec.phase is not JobPhase.RUNNING or rec.start_time is None:
        return False
    if live.step_warned == rec.start_time or live.stopping is not None:
        return False  # (warned in this run already, or being stopped)
    limit = rec.spec.walltime_s
    return limit is not None and now >= rec.start_time + limit - warning.before_s


def _send(ctl: Controller, live: LiveJob) -> bool:
    """Queue the signal for each running step task of ``live`` (marking the run warned)."""
    warning = live.request.signal
    rec = ctl.core.jobs[live.id]
    assert warning is not None
    live.step_warned = rec.start_time
    sent = False
    for task in live.tasks.values():
        node = ctl.nodes.get(task.node)
        if not task.remote or node is None or task.state not in ("delivered", "running"):
            continue
        if not node.takes_signals or len(node.signals) >= MAX_QUEUED:
            continue  # (an agent too old for signals; one whose queue is full)
        signal = TaskSignal(task_id=task.launch.task_id, signal=warning.name, main_only=False)
        if signal not in node.signals:
            node.signals.append(signal)
        sent = True
    return sent
