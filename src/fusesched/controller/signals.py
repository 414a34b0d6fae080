"""Signals for running jobs: the warning before the time limit, and a signal on demand
(Slurm's ``sbatch --signal`` and ``scancel --signal``).

The warning is the agents' to send: each launch of a job with a ``signal`` carries it
(:func:`launch_signal`), and the agent sends it once, its lead before the task's time limit
(a new limit, ``fusesched update --time``, moves it while it has not been sent).

A signal on demand (:func:`signal_array`, ``POST /v1/jobs/{id}/signal``) goes to every task of
the job that an agent runs, in its node's next heartbeat reply (``HeartbeatReply.signal``);
the job keeps running; with ``steps_only`` (Slurm's ``scancel --signal`` without ``-b`` or
``-f``) a batch script's job steps alone (its remote tasks: each ``srun``'s, the ranks of an
``mpirun`` in it), not the script's shell, as the time-limit warning goes
(controller/step_warning.py); a job with no step running then is signalled nothing and no
error (Slurm's too), and a job without a script (a YAML job, ``fusesched run``, an ``mpirun``
launcher job, a script in a container image), whose tasks are its program, is signalled whole.
``main_only`` (``scancel -b``) signals each task's main process: of a batch script's job, its
shell's alone (Slurm's batch step, not its other steps).
Refused (:class:`SignalRefused`, a 409): a job that is not running
(waiting, ended), one being stopped, one an external pool runs, one recovered after a restart
and not adopted yet, one whose tasks have not been sent to their agents yet, and one running
on a node whose agent is too old to understand signals (its heartbeats do not say
``signals=true``; such an agent's launches also go without their warning, see
``agents.heartbeat``). An array signals the members that can be signalled and says which it
left out and why; it is refused only when none can be. A signal already waiting for its node's
agent is not queued again, and a node's queue holds at most :data:`MAX_QUEUED`.

Every function here takes the controller's lock itself.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from fusesched.api.wire import LaunchSignal, TaskSignal
from fusesched.controller.holds import HoldRefused, job_targets
from fusesched.model.phases import JobPhase
from fusesched.submit.job_signal import signal_name
from fusesched.submit.launch_mode import batch_mode, warning_to_steps
from fusesched.submit.request import JobRequest

if TYPE_CHECKING:
    from fusesched.controller.records import LiveJob, LiveTask
    from fusesched.controller.service import Controller


class SignalRefused(HoldRefused):
    """A signal that cannot be delivered now (the job is not running here); a 409."""


def launch_signal(request: JobRequest) -> LaunchSignal | None:
    """The warning a launch of ``request``'s job carries to its agent (None: none)."""
    warning = request.signal
    if warning is None or warning_to_steps(request):
        return None  # (a batch script's, without B:, goes to its steps: step_warning.py)
    return LaunchSignal(name=warning.name, before_s=warning.before_s, main_only=warning.main_only)


#: why ``main_only`` and ``steps_only`` cannot both be asked for
EXCLUSIVE = "main_only (the batch shell) and steps_only (its steps) exclude each other"

#: signals waiting for one node's agent at most: a node that stays silent (a partition) does
#: not make its queue grow without bound (a signal sent again while queued is not queued twice)
MAX_QUEUED = 1024


def signal_array(
    ctl: Controller, job_id: str, name: str, main_only: bool = False, steps_only: bool = False
) -> tuple[list[str], dict[str, str]]:
    """Send signal ``name`` (a name or number, :func:`signal_name`) to every running task of
    ``job_id`` (of a batch script's job, see :func:`steps_apart`: with ``main_only`` its
    shell's main process alone, with ``steps_only`` its running steps' tasks alone): the job
    ids signalled, and the array members left out with the reason each (a job that is not
    an array leaves none out: it is signalled or refused).

    ``ValueError`` for a bad signal or for ``main_only`` with ``steps_only``,
    :class:`SignalRefused` for a job that cannot be signalled now (of an array: when no
    member can), ``UnknownJobError`` for an unknown id."""
    signal = signal_name(name)
    if main_only and steps_only:
        raise ValueError(EXCLUSIVE)
    with ctl.work:
        targets = job_targets(ctl, job_id)
        refused = {
            t: why for t in targets if (why := _refusal(ctl, t, main_only, steps_only)) is not None
        }
        if job_id in ctl.jobs and refused:  # one job (or an array member by its own id)
            raise SignalRefused(refused[job_id])
        chosen = [t for t in targets if t not in refused]
        if not chosen:
            reasons = "; ".join(refused[t] for t in targets[:3])
            more = f" (and {len(targets) - 3} more)" if len(targets) > 3 else ""
            raise SignalRefused(f"no member of array {job_id} can be signalled: {reasons}{more}")
        for target in chosen:
            for task in _signalled_tasks(ctl.jobs[target], main_only, steps_only):
                node = ctl.nodes.get(task.node)
                if node is not None:
                    sent = TaskSignal(
                        task_id=task.launch.task_id, signal=signal, main_only=main_only
                    )
                    if sent not in node.signals:  # already waiting for its agent: once
                        node.signals.append(sent)
        ctl.work.notify_all()  # the long polls of their nodes answer now
    return chosen, refused


def steps_apart(request: JobRequest) -> bool:
    """Whether ``request``'s job has job steps apart from the task that starts it: a batch
    script's own (not in a container image), whose steps are its remote tasks, as the
    time-limit warning reads it (:func:`fusesched.submit.launch_mode.warning_to_steps`)."""
    group = request.groups[0]
    return batch_mode(request) and group.script is not None and group.image is None


def _signalled_tasks(live: LiveJob, main_only: bool, steps_only: bool) -> list[LiveTask]:
    """The running tasks of ``live`` a signal goes to: all; of a batch script's job
    (:func:`steps_apart`), with ``main_only`` its shell's task alone (Slurm's ``scancel -b``:
    the batch step, no other), with ``steps_only`` its steps' (none while no step runs)."""
    apart = (main_only or steps_only) and steps_apart(live.request)
    return [
        t
        for t in live.tasks.values()
        if t.state in ("delivered", "running") and (not apart or t.remote == steps_only)
    ]


def _refusal(ctl: Controller, job_id: str, main_only: bool, steps_only: bool) -> str | None:
    """Why ``job_id`` cannot be signalled now; None: it can (with ``steps_only``, a batch
    script still starting can: it has no step to signal yet)."""
    live = ctl.jobs[job_id]
    rec = ctl.core.jobs.get(job_id)
    if live.adopting:
        return (
            f"job {job_id} runs and waits to be adopted after a restart: try again once its "
            "nodes are back"
        )
    if rec is None or rec.phase is not JobPhase.RUNNING:
        state = "waiting" if rec is None or not rec.phase.terminal else f"{rec.phase}"
        return f"job {job_id} is {state}: only a running job can be signalled"
    if live.pool is not None:
        return f"job {job_id} runs in the external pool {live.pool!r}: it cannot be signalled there"
    stopping = rec.stop_requested is not None or rec.preempt_reason is not None
    if stopping or live.stopping is not None or live.exit_sent:
        return f"job {job_id} is being stopped: it is no longer signalled"
    running = _signalled_tasks(live, main_only, steps_only)
    if not running and not (steps_only and steps_apart(live.request)):
        return f"job {job_id} is starting: its tasks are not running yet"
    for name in sorted({t.node for t in running}):
        node = ctl.nodes.get(name)
        if node is None:
            continue
        if not node.takes_signals:
            return (
                f"node {name}'s agent is too old to deliver signals (job {job_id} runs there): "
                "upgrade its agent"
            )
        if len(node.signals) >= MAX_QUEUED:
            return (
                f"node {name} has {len(node.signals)} signals its agent has not collected yet "
                f"(job {job_id} runs there): try again once it is heard from"
            )
    return None
