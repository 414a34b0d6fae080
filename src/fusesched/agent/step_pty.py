"""A job step on a pseudo-terminal, client side: ``srun --pty bash`` in an allocation
(``fusesched salloc``) or a batch script (:func:`run_on_terminal`, from
:mod:`fusesched.agent.step`), and ``fusesched run --jobid ID --overlap --pty bash`` from a
login node (:mod:`fusesched.cli.srun_attach`): both start one task as a step of the running
job, on a terminal of this one's type and size, and relay it with this terminal in raw mode
(:func:`fusesched.cli.pty_client.attach`); the exit status is the task's.

The step is asked for as ``srun`` asks for any (``POST /v1/jobs/{id}/steps``, with ``pty``:
controller/step_pty.py), waiting while running steps hold its slots (``--overlap``: it shares
them). Inside a job the job's own credential is used (``FUSESCHED_JOB_TOKEN``), under salloc
and from a login node the person's: the controller takes either for the job's steps and their
terminals, nobody else's (403).
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from fusesched.agent.step_gpus import gpu_ask
from fusesched.agent.step_plan import (
    StepLaunch,
    StepOptions,
    StepTask,
    exit_status,
    step_slots,
    task_argv,
    task_env,
)
from fusesched.agent.step_resources import cpu_mem_fields
from fusesched.agent.step_run import say
from fusesched.agent.step_wait import RETRY_MAX_S, RETRY_MIN_S, NoRoom, create_waiting

#: How long the task's exit code may take to be known once its terminal has closed.
EXIT_WAIT_S = 30.0
#: The exit status after ``~.`` (ssh's when its connection is closed).
LEFT = 255


class PtyStepError(Exception):
    """The step cannot be started (the message says why); ``code``: the exit status."""

    def __init__(self, why: str, code: int = 1) -> None:
        super().__init__(why)
        self.code = code


def refusal(options: StepOptions, tasks: Sequence[StepTask], mpi: bool) -> str | None:
    """Why ``srun --pty`` with these options cannot run (None: it can)."""
    if len(tasks) != 1:
        return (
            f"--pty runs one task, on one terminal (not {len(tasks)}: Slurm's srun --pty "
            "gives the terminal to task 0 alone; fusesched starts no others): give -n 1"
        )
    if options.het_groups is not None:
        return "--pty runs one task of component 0; --het-group is not taken with it"
    if mpi:
        return "--pty runs one task on a terminal, not an MPI job through mpirun (--mpi=none)"
    return None


def step_body(
    options: StepOptions,
    task: StepTask,
    env: Mapping[str, str],
    cwd: str,
    terminal: Mapping[str, Any],
    name: str,
    environ: Mapping[str, str],
) -> dict[str, Any]:
    """The step request of ``srun --pty``'s one task ``task`` (with the variables ``env``,
    in ``cwd``) on ``terminal``, with the GPUs, CPUs and memory its ``options`` ask for as
    any step's (``environ``: the script's: agent/step_resources.py). ``ValueError`` for bad
    options, saying why."""
    tasks = [task]
    launch = StepLaunch(
        task,
        task_argv(cwd, options.command),
        {**env} | task_env(task, tasks, options.cpus_per_task),
    )
    body: dict[str, Any] = {
        "slots": step_slots(tasks),
        "overlap": options.overlap,
        "tasks": [launch.request()],
        "name": name,
        "pty": dict(terminal),
    }
    gpus = gpu_ask(options, step_slots(tasks), False)
    if gpus is not None:
        body.update(gpus.fields())
    return body | cpu_mem_fields(options, environ, step_slots(tasks))


def start(
    client: Any,
    job_id: str,
    body: Mapping[str, Any],
    immediate: int | None,
    say: Callable[[str], None],
) -> str:
    """Start the step, waiting while running steps hold its slots (saying so once, and once
    more when it starts; ``immediate``: that many seconds at most); its task's id.
    :class:`PtyStepError` when it cannot start."""
    from fusesched.sdk import ControllerError

    created: dict[str, Any] = {}

    def attempt() -> int | str:
        try:
            created.update(client.start_step(job_id, body))
        except ControllerError as exc:
            if exc.status == 422 and "pty" in str(exc) and "extra" in str(exc).lower():
                raise PtyStepError(
                    "the controller is older than this srun: it cannot run a step on a "
                    "terminal (--pty)"
                ) from None
            if exc.status != 409:
                raise PtyStepError(f"cannot start the step: {exc}") from None
            return str(exc)
        return int(created["step_id"])

    try:
        create_waiting(job_id, immediate, attempt, say)
    except NoRoom as exc:
        raise PtyStepError(str(exc)) from None
    return str(created["task_ids"][0])


def relay(client: Any, job_id: str, task_id: str, say: Callable[[str], None]) -> int:
    """Relay the step task's terminal with this one until it has ended; its exit status
    (Slurm's: signal N is 128+N). SIGTERM, SIGHUP or ``~.`` stop the task first."""
    from fusesched.cli.pty_client import Hangup, Left, attach
    from fusesched.cli.pty_endpoints import StepTerminal

    try:
        attach(StepTerminal(client, task_id), sys.stdin.fileno(), sys.stdout.fileno(), say)
    except Hangup as exc:
        _stop(client, task_id, say)
        return 128 + exc.signum
    except Left:
        _stop(client, task_id, say)
        return LEFT
    return exit_status([_exit_code(client, job_id, task_id)])


def _exit_code(client: Any, job_id: str, task_id: str) -> int:
    """The task's exit code, once its agent has said it (a task gone with its job: killed;
    one still running when its job has ended is being killed with it: its exit, once the
    grace is over, is written, not waited for here)."""
    from fusesched.sdk import FINISHED, ControllerError

    deadline = time.monotonic() + EXIT_WAIT_S
    while time.monotonic() < deadline:
        try:
            task = client.task(task_id)
        except ControllerError as exc:
            if exc.status in (401, 404):  # (its job has ended: the task and its credential)
                break
            time.sleep(RETRY_MAX_S)
            continue
        if task["state"] == "exited":
            code = task.get("exit_code")
            return int(code) if code is not None else 255
        with contextlib.suppress(ControllerError):
            if client.show(job_id)["state"] in FINISHED:
                break
        time.sleep(RETRY_MIN_S)
    return 128 + signal.SIGKILL


def _stop(client: Any, task_id: str, say: Callable[[str], None]) -> None:
    from fusesched.sdk import ControllerError

    say(f"stopping task {task_id}")
    try:
        client.stop_task(task_id)
    except ControllerError as exc:
        say(f"could not stop task {task_id}: {exc}")


def run_on_terminal(
    options: StepOptions,
    env: Mapping[str, str],
    tasks: Sequence[StepTask],
    exported: Mapping[str, str],
    cwd: str,
    name: str,
) -> int:
    """``srun --pty`` in a job (a batch script, or salloc's command): its one task as a
    step of the job, relayed here; the exit status."""
    from fusesched.cli.pty_client import terminal
    from fusesched.sdk import Client

    why = refusal(options, tasks, options.mpi not in (None, "none"))
    if why is not None:
        say(f"error: {why}")
        return 2
    here = terminal(sys.stdin.fileno(), os.environ.get("TERM")).model_dump()
    try:
        body = step_body(options, tasks[0], exported, cwd, here, name, env)
    except ValueError as exc:
        say(f"error: {exc}")
        return 2
    # the job's own credential in its batch script; under salloc, the person's (as srun's)
    client = Client(
        env["FUSESCHED_CONTROLLER"],
        token=env.get("FUSESCHED_JOB_TOKEN") or None,
        ca=env.get("FUSESCHED_CA") or None,
    )
    try:
        task_id = start(client, env["FUSESCHED_JOB_ID"], body, options.immediate, say)
    except PtyStepError as exc:
        say(f"error: {exc}")
        return exc.code
    except KeyboardInterrupt:
        return 128 + signal.SIGINT
    return relay(client, env["FUSESCHED_JOB_ID"], task_id, say)
