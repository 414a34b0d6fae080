"""A job step on a pseudo-terminal (``srun --pty`` in an allocation or a batch script;
``fusesched run --jobid ID --pty`` from outside the job): its one task's launch carries the
client's terminal (:class:`~fusesched.submit.terminal.Terminal`), which the node's agent
makes and relays through the controller (agent/pty_bridge.py, controller/pty_relay.py), as a
``run --pty`` job's task.

The step is made as any other (controller/steps.py), unless its user has too many terminals
open already (:func:`within_cap`); :func:`give_terminal` then puts the terminal in its task's
launch, with the controller's lock still held, so that no heartbeat sends the launch without
it. An agent too old for terminals gets no such launch: it fails to start, saying why
(:func:`fusesched.controller.pty_tasks.refuse_older`)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from fusesched.controller import pty_cap
from fusesched.submit.errors import SubmitError
from fusesched.submit.terminal import Terminal

if TYPE_CHECKING:
    from fusesched.controller.service import Controller


def give_terminal(ctl: Controller, task_id: str, terminal: Terminal) -> None:
    """Run the just-created step task ``task_id`` on ``terminal`` (the caller holds the lock
    it created the step under)."""
    _, task = ctl.tasks[task_id]
    task.launch = task.launch.model_copy(update={"pty": terminal})
    node = ctl.nodes[task.node]
    node.outbox = [task.launch if t.task_id == task_id else t for t in node.outbox]


def within_cap(ctl: Controller, job_id: str) -> None:
    """Refuse a step on a terminal in ``job_id`` past its user's cap on open terminals
    (:class:`SubmitError`: 400, saying why; :mod:`fusesched.controller.pty_cap`); an unknown
    job is left to the step's own checks. The caller holds the lock."""
    live = ctl.jobs.get(job_id)
    why = None if live is None else pty_cap.refusal(ctl, live.spec.user)
    if why is not None:
        raise SubmitError(why)
