"""What ``fusesched salloc`` is to do, without I/O: its arguments split at the command
(:func:`split_salloc_args`, sbatch's options as ``fusesched run`` reads them), the job that
holds the allocation (:func:`allocation_request`), the allocation read back from that job's
output (:func:`read_allocation`) and the environment the command runs in
(:func:`allocation_env`).

The job that holds the allocation is an sbatch job whose batch script
(:mod:`fusesched.submit.salloc_holder`) prints the job's hostfile (the controller's,
``<node> slots=<tasks>`` per node: where the core placed the tasks, which the job's record
does not say) and a marker line, then sleeps until the job is cancelled or reaches its time
limit. salloc reads that hostfile from the job's output, so the
command's ``srun`` places its steps exactly as ``srun`` in a batch script of the same job
would.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from fusesched.agent.step_plan import read_hostfile
from fusesched.cli.srun_args import RunArgs, RunUsageError, job_args, split_run_args
from fusesched.hostlist import compress_hostlist, tasks_per_node
from fusesched.submit.salloc_holder import HOLDER, READY

#: salloc's own flag: wait for the allocation, print it and leave it (for ``fusesched
#: cancel``), running no command.
NO_SHELL = "--no-shell"
#: Slurm's salloc's ``--get-user-env``: the user's login variables for the command, which it
#: has already (it runs here, in this environment); taken and ignored, as a script's
#: ``#SBATCH --get-user-env`` is (``--get-user-env=L``: read by sbatch's parser, silently).
GET_USER_ENV = "--get-user-env"

#: sbatch options salloc refuses, and why.
REFUSED = {
    "wrap": "salloc takes the command itself (fusesched salloc [OPTIONS] [COMMAND [ARGS...]])",
    "array": "salloc makes one allocation, not an array: use fusesched sbatch --array",
    "test-only": "use fusesched sbatch --test-only --wrap=... to ask when it would start",
    "parsable": "sbatch's; salloc runs a command in the allocation, it prints no job id",
    "wait": "salloc always waits for the allocation",
    "output": "the command runs here, with this terminal: there is no batch output file",
    "error": "the command runs here, with this terminal: there is no batch error file",
    "open-mode": "the command runs here, with this terminal: there is no batch output file",
    "requeue": "an allocation is never requeued (the command would lose its nodes)",
    "pty": "not needed: the command runs here, in this terminal",
}

#: A job's own variables, and a task's, that the command must not inherit from where salloc
#: runs (salloc inside another job's task): the allocation's are set instead.
_JOB_VARIABLES = frozenset(
    {
        "FUSESCHED_JOB_TOKEN",
        "FUSESCHED_JOB_NAME",
        "FUSESCHED_TASK_ID",
        "FUSESCHED_TASK_INDEX",
        "FUSESCHED_NODE",
        "FUSESCHED_CPU_IDS",
        "FUSESCHED_GPU_INDICES",
        "FUSESCHED_MEMORY_LIMIT_BYTES",
        "FUSESCHED_CHECKPOINT_DIR",
        "FUSESCHED_RESTART_COUNT",
        "FUSESCHED_ARRAY_INDEX",
    }
)


@dataclass(frozen=True, slots=True)
class SallocArgs:
    """salloc's arguments: the job's sbatch options, the command (empty: the user's shell),
    where it runs (``-D``) and salloc's own settings."""

    run: RunArgs
    no_shell: bool
    warnings: tuple[str, ...]

    @property
    def command(self) -> tuple[str, ...]:
        return self.run.command


def split_salloc_args(args: Sequence[str]) -> SallocArgs:
    """salloc's arguments split at the command (:func:`fusesched.cli.srun_args.split_run_args`
    with salloc's refusals; the command may be left out). :class:`RunUsageError` for a bad
    one."""
    parsed = split_run_args(
        args,
        prog="salloc",
        refused=REFUSED,
        own_flags=frozenset({NO_SHELL, GET_USER_ENV}),
        command_needed=False,
    )
    warnings = list(parsed.warnings)
    if parsed.label:
        warnings.append("-l/--label is srun's: give it to srun inside the allocation; ignored")
    no_shell = NO_SHELL in parsed.own
    if no_shell and parsed.command:
        raise RunUsageError(f"{NO_SHELL} runs no command: give one or the other")
    return SallocArgs(parsed, no_shell, tuple(warnings))


def shell_command(environ: Mapping[str, str]) -> tuple[str, ...]:
    """The command when none is given: ``$SHELL``, else ``/bin/sh``."""
    return (environ.get("SHELL") or "/bin/sh",)


def allocation_request(parsed: SallocArgs, command: Sequence[str]) -> tuple[Any, tuple[str, ...]]:
    """The job that holds the allocation (a ``JobRequest``) and the parser's warnings.

    sbatch's job for the options, named after the command unless ``-J`` names it, never
    requeued, whose batch script is :data:`HOLDER`: no output file and no working directory
    of its own on the node (``-D`` is where the command runs, here).
    :class:`fusesched.submit.errors.SubmitError` for a bad option value."""
    from fusesched.submit.request import parse_request
    from fusesched.submit.sbatch import parse_sbatch

    named = job_args(replace(parsed.run, command=tuple(command)))[:-1]  # (not its --wrap)
    args = [*named, "--no-requeue", f"--wrap={HOLDER}"]
    job = parse_sbatch("", source="salloc", args=args)
    data = job.request.model_dump(mode="json", exclude_none=True)
    for key in ("output", "error", "open_mode"):
        data.pop(key, None)
    data["groups"][0].pop("workdir", None)
    return parse_request(data, source="salloc"), job.warnings


def told_env(request: Any, host: str | None) -> dict[str, str]:
    """What the command is told of how its allocation (the job ``request``, a
    ``JobRequest``) was asked for, as Slurm's salloc tells it: ``SLURM_SUBMIT_HOST``
    (``host``: this one; None: not told), ``SLURM_JOB_RESERVATION`` and its options'
    (``SLURM_NTASKS_PER_NODE``, ``SLURM_MEM_PER_CPU``, ``SLURM_GPUS``…: submit/slurm_options.py;
    not ``SLURM_JOB_DEPENDENCY`` and ``SLURM_EXPORT_ENV``, which salloc does not set)."""
    env = {"SLURM_SUBMIT_HOST": host} if host is not None else {}
    if request.reservation is not None:
        env["SLURM_JOB_RESERVATION"] = request.reservation
    if request.slurm_options is not None:
        told = request.slurm_options.model_copy(update={"dependency": None, "export": None})
        env.update(told.variables())
    return env


def workdir(parsed: SallocArgs, cwd: str) -> str:
    """Where the command runs: ``-D``/``--chdir`` (relative to ``cwd``), else ``cwd``."""
    chdir: str | None = None
    options = parsed.run.options
    for i, option in enumerate(options):
        name, eq, value = option.partition("=")
        if name in ("-D", "--chdir"):
            chdir = value if eq else options[i + 1] if i + 1 < len(options) else None
        elif option.startswith("-D") and len(option) > 2:
            chdir = option[2:]
    return os.path.join(cwd, chdir) if chdir else cwd


def read_allocation(output: str) -> list[tuple[str, int]] | None:
    """The hostfile the holding job printed (node, slots) in allocation order; None until
    the marker line has come."""
    head, found, _ = output.partition(READY)
    if not found:
        return None
    return read_hostfile(head)


def hostfile_text(hosts: Sequence[tuple[str, int]]) -> str:
    """The agent's hostfile format: ``<node> slots=<tasks>`` per node."""
    return "".join(f"{node} slots={slots}\n" for node, slots in hosts)


@dataclass(frozen=True, slots=True)
class Allocation:
    """A granted allocation, as the command's environment tells it."""

    job: Mapping[str, Any]  # the job's record (GET /v1/jobs/{id})
    hosts: Sequence[tuple[str, int]]  # its hostfile: (node, tasks) in allocation order
    controller: str  # the controller's URL the command's srun talks to
    folder: str  # salloc's private folder: the hostfile, bin/srun
    hostfile: str  # its path
    srun_dir: str  # the folder of the srun wrapper
    told: Mapping[str, str] = field(default_factory=dict)  # (:func:`told_env`)


def allocation_env(
    environ: Mapping[str, str],
    allocation: Allocation,
    token: str | None,
    ca: str | None,
) -> dict[str, str]:
    """The command's environment: ``environ`` (salloc's) without another job's or task's
    variables, plus Slurm's variables of the allocation and what fusesched's ``srun``
    (:mod:`fusesched.agent.step`) needs to run steps from here: the job, the controller,
    the hostfile, a folder of its own (``FUSESCHED_TASK_DIR``, as a task has), the credential
    salloc used (``FUSESCHED_TOKEN``; the step uses it as a batch script's uses the job's)
    and the CA; ``srun`` first on ``PATH``."""
    job = allocation.job
    job_id = str(job["id"])
    nodes = [node for node, _ in allocation.hosts]
    counts = [slots for _, slots in allocation.hosts]
    env = {
        name: value
        for name, value in environ.items()
        if not name.startswith("SLURM_") and name not in _JOB_VARIABLES
    }
    node_list = ",".join(nodes)
    env.update(
        {
            "SLURM_JOB_ID": job_id,
            "SLURM_JOBID": job_id,
            "SLURM_JOB_NAME": str(job.get("name") or ""),
            "SLURM_JOB_USER": str(job.get("user") or ""),
            "SLURM_JOB_PARTITION": str(job.get("queue") or "default"),
            "SLURM_JOB_ACCOUNT": str(job.get("tenant") or "default"),
            "SLURM_CLUSTER_NAME": "fusesched",
            "SLURM_JOB_NODELIST": compress_hostlist(nodes),
            "SLURM_NODELIST": compress_hostlist(nodes),
            "SLURM_JOB_NUM_NODES": str(len(nodes)),
            "SLURM_NNODES": str(len(nodes)),
            "SLURM_NTASKS": str(sum(counts)),
            "SLURM_NPROCS": str(sum(counts)),
            "SLURM_TASKS_PER_NODE": tasks_per_node(counts),
            "FUSESCHED_JOB_ID": job_id,
            "FUSESCHED_CONTROLLER": allocation.controller,
            "FUSESCHED_HOSTFILE": allocation.hostfile,
            "FUSESCHED_TASK_DIR": allocation.folder,
            "FUSESCHED_NODELIST": node_list,
            "FUSESCHED_NUM_NODES": str(len(nodes)),
            "FUSESCHED_NUM_TASKS": str(sum(counts)),
            "PATH": os.pathsep.join(p for p in (allocation.srun_dir, environ.get("PATH")) if p),
        }
    )
    if job.get("qos"):
        env["SLURM_JOB_QOS"] = str(job["qos"])
    env.update(allocation.told)
    if token:
        env["FUSESCHED_TOKEN"] = token
    if ca:
        env["FUSESCHED_CA"] = ca
    return env
