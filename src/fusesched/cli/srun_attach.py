"""``fusesched run --jobid ID --overlap --pty [-w NODE] COMMAND``: Slurm's ``srun --jobid=ID
--overlap --pty bash`` from a login node, to debug a running job on its node. The command
runs as a step of that job (its owner's or an admin's: the controller refuses anyone else,
403), on a terminal relayed to this one, on the node ``-w`` names (else the job's first),
with the job's environment (not this shell's: it runs where the job runs) and its own
Slurm step variables; ``--overlap`` shares the slots the job's running steps hold (without
it the step waits until they are free). The exit status is the command's
(:mod:`fusesched.agent.step_pty` does the step and the relay, as for ``srun --pty`` in an
allocation).

:func:`attach_options` reads what ``run`` takes with ``--jobid`` (pure); :func:`in_job` runs it.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

#: ``run``'s own options for a step in a running job.
JOBID = "--jobid"
OVERLAP = "--overlap"

_NODE = ("-w", "--nodelist")
_NAME = ("-J", "--job-name")


class AttachUsageError(ValueError):
    """An option ``run --jobid`` does not take, or a missing value (exit status 2)."""


@dataclass(frozen=True, slots=True)
class AttachOptions:
    node: str | None = None  # -w: the node to run on (None: the job's first)
    name: str | None = None  # -J: the step's name (None: the command's)


def attach_options(options: Sequence[str]) -> AttachOptions:
    """The options ``run --jobid`` takes (``-w NODE``, ``-J NAME``), of the job options
    ``run`` split off; :class:`AttachUsageError` for any other (the job exists: its
    resources are not asked again)."""
    found: dict[str, str] = {}
    args = list(options)
    k = 0
    while k < len(args):
        arg = args[k]
        written, eq, value = arg.partition("=")
        short = next((o for o in (*_NODE, *_NAME) if len(o) == 2 and arg.startswith(o)), None)
        if short is not None and len(arg) > 2:
            written, value, eq = short, arg[2:], "="
        if written not in (*_NODE, *_NAME):
            raise AttachUsageError(
                f"{written}: fusesched run --jobid starts a step in a job that exists; it "
                "takes -w NODE and -J NAME, not the options of a new job"
            )
        if not eq:
            if k + 1 >= len(args):
                raise AttachUsageError(f"{written} needs a value")
            k += 1
            value = args[k]
        if written in _NODE and "," in value:
            raise AttachUsageError(f"{written} {value}: --pty runs one task, on one node")
        found["node" if written in _NODE else "name"] = value
        k += 1
    return AttachOptions(found.get("node"), found.get("name"))


def pick_node(job: dict[str, Any], wanted: str | None) -> str:
    """The node the step runs on: ``wanted``, one of the running job's, else its first;
    :class:`AttachUsageError` for a job that does not run or a node not its own."""
    nodes = list(job.get("nodes") or ())
    if job.get("state") != "Running" or not nodes:
        raise AttachUsageError(f"job {job['id']} is not running (it is {job.get('state')})")
    if wanted is not None and wanted not in nodes:
        raise AttachUsageError(f"-w {wanted}: job {job['id']} runs on {','.join(nodes)}, not there")
    return wanted or nodes[0]


def in_job(
    job_id: str,
    command: Sequence[str],
    options: Sequence[str],
    overlap: bool,
    client: Any,
    say: Callable[[str], None],
) -> int:
    """Run ``command`` as a step of the running job ``job_id`` on a terminal relayed to this
    one; its exit status (2 for a usage mistake, 1 when the step cannot start)."""
    from fusesched.agent.step_plan import StepOptions, StepTask
    from fusesched.agent.step_pty import PtyStepError, relay, start, step_body
    from fusesched.cli.pty_client import terminal
    from fusesched.sdk import ControllerError

    try:
        if not job_id:  # (``--jobid=``: else the route of every job is asked)
            raise AttachUsageError(f"{JOBID} needs a job id")
        asked = attach_options(options)
        node = pick_node(client.show(job_id), asked.node)
    except AttachUsageError as exc:
        say(f"error: {exc}")
        return 2
    except ControllerError as exc:
        say(f"error: {exc}")
        return 1
    name = asked.name or os.path.basename(command[0]) or command[0]
    task = StepTask(rank=0, node=node, node_index=0, local_rank=0, local_size=1)
    here = terminal(sys.stdin.fileno(), os.environ.get("TERM")).model_dump()
    step = StepOptions(command=tuple(command), overlap=overlap, pty=True)
    body = step_body(step, task, {}, os.getcwd(), here, name[:200], {})
    try:
        task_id = start(client, job_id, body, None, say)
    except PtyStepError as exc:
        say(f"error: {exc}")
        return exc.code
    return relay(client, job_id, task_id, say)
