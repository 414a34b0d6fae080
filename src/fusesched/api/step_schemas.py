"""What the REST API takes and returns for work inside a running job: a job step (``srun``:
its slots, tasks, GPUs, CPUs, memory and terminal) and a task launched on one of the job's
nodes (a step's helper, an MPI daemon), with the limits on a launch's environment. The rest
of the API's schemas are in :mod:`fusesched.api.schemas`."""

from __future__ import annotations

import base64
import binascii
from typing import Annotated

from pydantic import Field, field_validator, model_validator

from fusesched.agent.step_stdin import STDIN_MAX_BYTES, STDIN_MAX_TOTAL
from fusesched.api.schemas import _Input, _View
from fusesched.model.text import is_env_name
from fusesched.submit.terminal import Terminal

#: A launch's own variables (:class:`RemoteLaunch`'s ``env``): at most this many, each
#: ``NAME=value`` at most this long and all of them together at most this many bytes (UTF-8)
#: — what one process's environment holds on Linux (128 KiB a string), with room left for
#: the job's own.
LAUNCH_ENV_MAX_VARS = 4096
LAUNCH_ENV_MAX_VAR_BYTES = 128 * 1024 - 1
LAUNCH_ENV_MAX_BYTES = 1024 * 1024
#: A name a request's own ``env`` may not use: it once carried a step's standard input from
#: the route to controller/steps.py (now the ``stdin`` parameter of ``create_step``), and a
#: request's variable of that name is dropped (:meth:`StepRequest._stdin_checked`), never
#: taken for standard input nor given to a task (``FUSESCHED_STEP_*`` names are a step's
#: marks: controller/remote_tasks.py's ``settable`` drops any a launch sends, too).
STEP_STDIN_ENV = "FUSESCHED_STEP_STDIN"


class RemoteLaunch(_Input):
    """A task of a running job to start on one of its nodes: ``argv`` with ``env`` over the
    job's environment (a step's variables: in the process's environment, never in a command
    line). What the task's job, node or folder gives it (``HOME``, ``FUSESCHED_TASK_ID``…:
    ``agent/step_plan.py``'s ``TASK_OWN``) is not taken from ``env``."""

    node: str
    argv: list[str] = Field(min_length=1)
    env: dict[str, str] = Field(default_factory=dict)
    # the running job step it is a helper of (a step's mpirun's daemon), for accounting
    step: int | None = Field(default=None, ge=0, le=2**31 - 1)

    @field_validator("env")
    @classmethod
    def _env(cls, env: dict[str, str]) -> dict[str, str]:
        if len(env) > LAUNCH_ENV_MAX_VARS:
            raise ValueError(f"{len(env)} variables: at most {LAUNCH_ENV_MAX_VARS}")
        total = 0
        for name, value in env.items():
            if not is_env_name(name):
                raise ValueError(f"{name[:100]!r} is not a variable name")
            try:
                size = len(name) + 1 + len(value.encode())
            except UnicodeEncodeError:  # (a lone surrogate: no process can be given it)
                raise ValueError(f"{name}: its value is not UTF-8 text") from None
            if size > LAUNCH_ENV_MAX_VAR_BYTES:
                raise ValueError(f"{name}: {size} bytes, at most {LAUNCH_ENV_MAX_VAR_BYTES}")
            total += size
        if total > LAUNCH_ENV_MAX_BYTES:
            raise ValueError(f"{total} bytes of variables: at most {LAUNCH_ENV_MAX_BYTES}")
        return env


def _b64_size(size: int) -> int:
    """The length of ``size`` bytes in base64."""
    return (size + 2) // 3 * 4


class HetStepSlots(_Input):
    """A heterogeneous job's step's share of one component (``srun --het-group``): its
    tasks per node there."""

    group: Annotated[int, Field(ge=0, le=9999)]
    slots: dict[str, Annotated[int, Field(ge=1)]] = Field(min_length=1)


class StepRequest(_Input):
    """A job step (``srun``): its slots per node (its tasks there, in its node order), its
    tasks to start (each on one of those nodes; an MPI step's one: mpirun, on the first),
    and whether it shares the slots of the running steps (``--overlap``). A heterogeneous
    job's step also gives its share of each component it runs on (``het``; ``slots`` is
    their sum; absent: component 0). ``gpus``: the GPUs it asks for on each of its nodes
    (``srun --gres=gpu:N``…; absent: none asked for, controller/step_gpus.py), and with
    ``gpus_per_task`` how many each task gets of its node's; ``name``: its name in
    accounting (``srun -J``, else its command's); ``pty``: its one task's terminal.
    ``cpus_per_task``: each task's own CPUs (``srun -c``; absent: as many as the job's
    tasks have); ``memory``: the step's memory on each of its nodes in bytes (``--mem``,
    ``--mem-per-cpu``; 0: all of the job's there; absent: no limit): controller/step_cpus.py.
    ``stdin``: ``srun``'s standard input (base64; at most 16 MiB, and 64 MiB counting each
    task's copy) for every task or, with ``stdin_task``, for ``tasks[stdin_task]`` alone
    (absent: every task's is ``/dev/null``, or it is streamed, outside the request, to the
    tasks that start behind a reader of it: api/stdin_routes.py): agent/step_stdin.py."""

    slots: dict[str, Annotated[int, Field(ge=1)]] = Field(min_length=1)
    tasks: list[RemoteLaunch] = Field(min_length=1)
    overlap: bool = False
    het: list[HetStepSlots] | None = Field(default=None, min_length=1)
    gpus: dict[str, Annotated[int, Field(ge=0, le=4096)]] | None = None
    gpus_per_task: int | None = Field(default=None, ge=1, le=4096)
    name: str | None = Field(default=None, min_length=1, max_length=200)
    cpus_per_task: int | None = Field(default=None, ge=1, le=4096)
    memory: dict[str, Annotated[int, Field(ge=0, le=2**60)]] | None = None
    # ``srun --pty``: its one task runs on a pseudo-terminal of this type and size, relayed
    # through the controller (``/v1/tasks/{id}/pty/...``: controller/step_pty.py)
    pty: Terminal | None = None
    stdin: str | None = Field(default=None, min_length=1, max_length=_b64_size(STDIN_MAX_BYTES))
    stdin_task: int | None = Field(default=None, ge=0)

    @model_validator(mode="after")
    def _stdin_checked(self) -> StepRequest:
        """Check ``stdin`` (the route hands it to ``Controller.create_step``); drop a
        request's own variable :data:`STEP_STDIN_ENV`."""
        for task in self.tasks:
            task.env.pop(STEP_STDIN_ENV, None)  # (never a request's own)
        if self.stdin is None:
            if self.stdin_task is not None:
                raise ValueError("stdin_task needs stdin")
            return self
        if self.pty is not None:
            raise ValueError("stdin: a step on a pseudo-terminal (pty) reads that terminal")
        try:
            size = len(base64.b64decode(self.stdin, validate=True))
        except (binascii.Error, ValueError):
            raise ValueError("stdin must be base64") from None
        if self.stdin_task is not None and self.stdin_task >= len(self.tasks):
            raise ValueError(f"stdin_task: the step has {len(self.tasks)} task(s)")
        getting = self.tasks if self.stdin_task is None else [self.tasks[self.stdin_task]]
        if size > STDIN_MAX_BYTES or size * len(getting) > STDIN_MAX_TOTAL:
            raise ValueError(
                f"stdin: {size} bytes to {len(getting)} task(s): at most "
                f"{STDIN_MAX_BYTES} bytes, and {STDIN_MAX_TOTAL} bytes in all"
            )
        return self

    @model_validator(mode="after")
    def _one_task_on_a_terminal(self) -> StepRequest:
        if self.pty is not None and len(self.tasks) != 1:
            raise ValueError(
                f"pty: a step on a pseudo-terminal (srun --pty) runs one task, not "
                f"{len(self.tasks)}: Slurm's srun --pty gives the terminal to task 0 alone; "
                "fusesched starts no others"
            )
        return self

    @model_validator(mode="after")
    def _het_adds_up(self) -> StepRequest:
        if self.het is None:
            return self
        groups = [part.group for part in self.het]
        if len(set(groups)) != len(groups):
            raise ValueError("het: a component is given twice")
        total: dict[str, int] = {}
        for part in self.het:
            for node, count in part.slots.items():
                total[node] = total.get(node, 0) + count
        if total != self.slots:
            raise ValueError("slots must be the sum of the components' slots in het")
        return self

    @model_validator(mode="after")
    def _gpus_on_its_nodes(self) -> StepRequest:
        if self.gpus is not None and set(self.gpus) != set(self.slots):
            raise ValueError("gpus must name each node of slots, and no other")
        if self.gpus_per_task is not None and self.gpus is None:
            raise ValueError("gpus_per_task needs gpus")
        if self.memory is not None and set(self.memory) != set(self.slots):
            raise ValueError("memory must name each node of slots, and no other")
        return self


class StepCreated(_View):
    step_id: int
    task_ids: list[str]


class RemoteTask(_View):
    task_id: str
    state: str
    exit_code: int | None = None
    reason: str = ""
