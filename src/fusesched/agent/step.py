"""``srun`` inside a fusesched batch job: ``python -m fusesched.agent.step [OPTIONS] COMMAND...``.

A batch script runs once, on the first node of its allocation; Slurm scripts start their work
with ``srun``, which runs COMMAND as N tasks over the allocation (a *job step*). This module
is that: the agent puts it on the PATH of ``slurm_env`` jobs' tasks as ``srun``
(:mod:`fusesched.agent.step_wrapper`). The step asks the controller for itself
(``POST /v1/jobs/{id}/steps``, with the job's own credential, as ``mpirun``'s launcher uses;
under ``fusesched salloc``, which runs a command on the submit host in an allocation, with its
owner's): the controller gives it an id and its share of the job's slots (and of its GPUs,
with ``--gres=gpu:N``…: :mod:`fusesched.agent.step_gpus`) and starts every task of it, those
on the first node included, at once, or answers that running steps hold the slots (409:
the step says so once and asks again until they are free; ``--immediate``: it gives up)
(:mod:`fusesched.controller.job_steps`). Each task runs as a task of the job
(``<job>.remote.<k>``) on its node, outside the batch task's CPU pinning and memory cgroup
(which are one task's share), on CPUs of its own and within the memory its step asks for
(:mod:`fusesched.agent.step_resources`), is killed with the job, and has its output kept by
the controller. The step follows each task's output through the log route and prints it (``-l``:
each line prefixed with the task's rank), and exits 0 if every task exited 0, else with the
highest exit code (a task killed by signal N counts as 128+N).

An MPI program (``--mpi=pmix``…, ``$SLURM_MPI_TYPE``, or a program linked to ``libmpi``) runs
as one task instead, ``mpirun`` on the step's first node, which starts the ranks as one MPI
job (:mod:`fusesched.agent.step_mpi`).

Placement: N tasks (``-n``, else ``$SLURM_NTASKS``) over the hostfile's nodes in allocation
order (``-N``, else ``$SLURM_NNODES``: the first N, each getting at least one task;
``--ntasks-per-node``: at most that many per node), filling each node's slots before the next
(Slurm's default block distribution).

Each task's variables (the script's exported ones, the step's and its ranks) travel in its
launch's environment (the request's ``env``), not in its command line, which ``ps`` shows on
the nodes; a controller older than that field gets them as ``env NAME=value…`` in front of
the command, as before, with a warning.

Its standard input is forwarded to its tasks, as Slurm's srun forwards it: srun's own (when
it is no terminal) to every task, or ``-i N`` to task N alone, as it comes (one that has
ended already travels whole with the step; a controller older than streams gets it whole,
read before the step starts); ``-i none`` to none; ``-i FILE``: each task reads that file on
its node (:mod:`fusesched.agent.step_stdin`, :mod:`fusesched.agent.stdin_forward`).

What the step is to do (options, placement, each task's environment) is worked out
without I/O in :mod:`fusesched.agent.step_plan`; the step's round trips with the controller
(asking for it, following its tasks and printing their output) are
:mod:`fusesched.agent.step_run`'s.
"""

from __future__ import annotations

import os
import signal
import ssl
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from functools import partial
from pathlib import Path
from types import FrameType

import httpx

from fusesched.agent.mpi_program import program_libraries
from fusesched.agent.stdin_forward import Forwarder, OlderController, open_stream
from fusesched.agent.step_args import mpi_listing, parse_args, unknown_mpi
from fusesched.agent.step_files import (
    NO_FILES,
    StepFiles,
    emptied,
    empty,
    redirected,
    split_files,
)
from fusesched.agent.step_gpus import gpu_ask
from fusesched.agent.step_het import HetShares, het_groups
from fusesched.agent.step_het_plan import HetStep, plan_het_step
from fusesched.agent.step_mpi import links_mpi, mpi_mode, mpirun_argv, mpirun_env
from fusesched.agent.step_place import place_step
from fusesched.agent.step_plan import (
    StepError,
    StepLaunch,
    StepOptions,
    StepTask,
    exit_status,
    read_hostfile,
    step_exports,
    step_slots,
    task_argv,
    task_env,
)
from fusesched.agent.step_resources import cpu_mem_fields
from fusesched.agent.step_run import Step, error, say, warn
from fusesched.agent.step_stdin import (
    NO_INPUT,
    StepInput,
    first_stdin,
    input_argv,
    mpirun_stdin,
    read_stdin,
    step_input,
    whole_input,
)
from fusesched.agent.step_wait import NoRoom, create_waiting
from fusesched.client_base import default_token

#: srun's standard input, which it forwards to its tasks.
STDIN_FD = 0


def main(argv: list[str] | None = None) -> int:
    try:  # (--output, --error, --open-mode: agent/step_files.py)
        files, args = split_files(sys.argv[1:] if argv is None else argv)
    except StepError as exc:
        error(str(exc))
        return 2
    listing = mpi_listing(args)
    if listing is not None:  # srun --mpi=list: no step
        print(listing, end="")
        return 0
    try:
        options = parse_args(args)
    except StepError as exc:
        error(str(exc))
        return 2
    env = os.environ
    job_id = env.get("FUSESCHED_JOB_ID")
    url = env.get("FUSESCHED_CONTROLLER")
    if not job_id or not url:
        error(
            "not inside a fusesched job (FUSESCHED_JOB_ID and FUSESCHED_CONTROLLER are unset): "
            "this srun runs job steps of fusesched batch jobs and salloc allocations only"
        )
        return 2
    hostfile = env.get("FUSESCHED_HOSTFILE", "")
    try:
        hosts = read_hostfile(Path(hostfile).read_text(encoding="utf-8"))
    except OSError:
        error(
            f"no hostfile at {hostfile or '$FUSESCHED_HOSTFILE'}: srun runs in the batch "
            "script of a job (sbatch), on its first node, or under fusesched salloc"
        )
        return 2
    het: HetStep | None = None
    try:
        groups = het_groups(options.het_groups, env)
        if groups is None:
            tasks, warnings = place_step(hosts, options, env)  # (-w, -x, -r, -m: step_place.py)
        else:  # a heterogeneous job's step: over its components' own hostfiles
            het = plan_het_step(options, env, hostfile, groups)
            tasks, warnings = het.tasks, het.warnings
        exported = step_exports(options, env)
    except StepError as exc:
        error(str(exc))
        return 2
    for warning in (*options.warnings, *warnings):
        warn(warning)
    cwd = os.getcwd()
    if options.pty and files.any:
        error("--pty: the task's output is this terminal, not files (--output, --error)")
        return 2
    if options.pty:  # one task on a terminal relayed to this one
        from fusesched.agent.step_pty import run_on_terminal

        return run_on_terminal(options, env, tasks, exported, cwd, step_name(options))
    mpi = _through_mpirun(options, env, cwd)
    try:
        gpus = gpu_ask(options, step_slots(tasks), mpi)
        resources = cpu_mem_fields(options, env, step_slots(tasks))
    except ValueError as exc:
        error(str(exc))
        return 2
    exported, own_env = het.envs(exported, env, mpi) if het is not None else (exported, [])
    try:  # (what srun's input holds already: whole, or the head of a stream)
        stdin = step_input(options.input, tasks, mpi, lambda: first_stdin(STDIN_FD))
    except StepError as exc:
        error(str(exc))
        return 1
    except KeyboardInterrupt:  # (Ctrl-C while it waited for the input's end)
        error("interrupted while reading standard input: nothing was started")
        return 128 + signal.SIGINT
    # the job's own credential in its batch script; under salloc (no job credential), the
    # user's, as every fusesched command finds it: the owner may run steps of their own job
    token = env.get("FUSESCHED_JOB_TOKEN") or default_token()
    headers = {"authorization": f"Bearer {token}"} if token else {}
    ca = env.get("FUSESCHED_CA")
    verify: ssl.SSLContext | bool = ssl.create_default_context(cafile=ca) if ca else True
    connect = partial(
        httpx.Client, base_url=url.rstrip("/"), timeout=30.0, headers=headers, verify=verify
    )
    with connect() as http:
        try:  # (read before anything is started or emptied: too much of it starts nothing)
            stdin = _streamed(http, job_id, stdin, tasks, mpi)
        except (StepError, httpx.HTTPError) as exc:
            error(str(exc))
            return 1
        except KeyboardInterrupt:  # (Ctrl-C while it waited for the input's end)
            error("interrupted while reading standard input: nothing was started")
            return 128 + signal.SIGINT
        launches = _launches(options, env, tasks, exported, cwd, mpi, own_env, files, stdin)
        for path in emptied(files, tasks[:1] if mpi else tasks, env):  # (shared: added to)
            empty(path)
        step = Step(http, job_id, options.label, mpi, gpus, step_name(options), resources)
        step.stdin = stdin.fields(tasks, mpi)

        def stop(signum: int, _frame: FrameType | None) -> None:
            step.stop_signal = signum

        for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            signal.signal(signum, stop)
        try:
            shares = het.shares if het is not None else None
            refused = _create(step, step_slots(tasks), options, launches, shares)
        except (StepError, httpx.HTTPError) as exc:
            error(str(exc))
            return 1
        if refused is not None:
            return refused
        forwarder = _forward(connect, job_id, stdin, step, mpi)
        codes = step.follow(options.kill_on_bad_exit, options.wait)
        if forwarder is not None:  # (the step has ended: whatever srun's input still holds)
            forwarder.stop()
        for run in step.running:
            if run.code not in (None, 0):
                why = f" ({run.reason})" if run.reason and run.reason != "exited" else ""
                code = exit_status([run.code])
                who = "mpirun" if mpi else f"task {run.task.rank}"
                error(f"{who} on {run.task.node}: exited with exit code {code}{why}")
    if step.stop_signal is not None:
        return 128 + step.stop_signal
    return exit_status(codes)


def _streamed(
    http: httpx.Client,
    job_id: str,
    stdin: StepInput,
    tasks: Sequence[StepTask],
    mpi: bool,
) -> StepInput:
    """``stdin`` with its stream opened, if it is streamed; a controller older than streams
    gets it whole instead (read to its end now, said once)."""
    if not stdin.streamed:
        return stdin
    try:
        return replace(stdin, stream=open_stream(http, job_id))
    except OlderController:
        warn(
            "the controller is older than this srun: it cannot forward standard input as it "
            "comes; srun reads it to its end before the step starts"
        )
    return whole_input(stdin, tasks, mpi, _rest_of_stdin)


def _rest_of_stdin(head: bytes) -> bytes | None:
    return read_stdin(STDIN_FD, say=say, head=head)


def _forward(
    connect: Callable[[], httpx.Client], job_id: str, stdin: StepInput, step: Step, mpi: bool
) -> Forwarder | None:
    """Start forwarding srun's standard input to the step's tasks that read it, if it is
    streamed."""
    if stdin.stream is None:
        return None
    readers = [run.task_id for run in step.running if stdin.reads(run.task, mpi)]
    forwarder = Forwarder(connect, job_id, stdin.stream, STDIN_FD, stdin.data or b"", warn)
    forwarder.start(readers)
    return forwarder


def _create(
    step: Step,
    slots: Mapping[str, int],
    options: StepOptions,
    launches: Sequence[StepLaunch],
    het: HetShares | None = None,
) -> int | None:
    """Start the step, waiting while the job's slots are busy (saying so once, and once
    more when it starts), as long as it takes (``--immediate``: that many seconds, or
    none); None once it runs, else the exit status (a signal while waiting, or no room)."""

    def attempt() -> int | str:
        busy = step.create(slots, options.overlap, launches, het)
        if busy is not None:
            return busy
        assert step.step_id is not None  # (a created step has its id)
        return step.step_id

    try:
        created = create_waiting(
            step.job_id, options.immediate, attempt, say, lambda: step.stop_signal is not None
        )
    except NoRoom as exc:
        error(str(exc))
        return 1
    if created is None and step.stop_signal is not None:
        return 128 + step.stop_signal
    return None


def _launches(
    options: StepOptions,
    env: Mapping[str, str],
    tasks: Sequence[StepTask],
    exported: Mapping[str, str],
    cwd: str,
    mpi: bool,
    own_env: Sequence[Mapping[str, str]] = (),
    files: StepFiles = NO_FILES,
    stdin: StepInput = NO_INPUT,
) -> list[StepLaunch]:
    """What the step starts: each of its tasks (with its own variables ``own_env[rank]``,
    if given: a heterogeneous job's component's), or (``mpi``) one mpirun on its first node
    that starts them all as one MPI job (its ranks get the variables from mpirun's own,
    ``-x NAME``); with ``files`` (--output, --error: agent/step_files.py), each started
    with its own (through mpirun: mpirun's); with an input file (``stdin``, -i FILE:
    agent/step_stdin.py), each reading it (through mpirun: mpirun, handing it on)."""
    if not mpi:
        commands = redirected(files, tasks, env, options.command, sys.executable)
        return [
            StepLaunch(
                task,
                task_argv(cwd, input_argv(stdin, task, env, command)),
                {**exported, **(own_env[task.rank] if own_env else {})}
                | task_env(task, tasks, options.cpus_per_task),
            )
            for task, command in zip(tasks, commands, strict=True)
        ]
    launcher = env.get("OMPI_MCA_plm_rsh_agent") or f"{sys.executable} -m fusesched.agent.remote"
    own, passed = mpirun_env(exported, env, tasks, options.cpus_per_task, launcher)
    command = mpirun_stdin(stdin, mpirun_argv(tasks, passed, options.label, options.command))
    (started,) = redirected(files, tasks[:1], env, command, sys.executable)
    argv = task_argv(cwd, input_argv(stdin, tasks[0], env, started, mpi=True))
    return [StepLaunch(tasks[0], argv, own)]


def step_name(options: StepOptions) -> str:
    """The step's name in accounting: ``-J``, else its command's base name (as Slurm's), cut
    to the controller's limit (a program's file name may be longer)."""
    name = options.job_name or os.path.basename(options.command[0]) or options.command[0]
    return name[:200]  # (StepRequest's limit: api/step_schemas.py)


def _through_mpirun(options: StepOptions, env: Mapping[str, str], cwd: str) -> bool:
    """Whether the step runs through mpirun: ``--mpi``, else ``$SLURM_MPI_TYPE``, else
    whether its program is linked to libmpi (said once on stderr)."""
    site = env.get("SLURM_MPI_TYPE") or None
    if options.mpi is None and site is not None:
        said = unknown_mpi(site)
        if said is not None:
            warn(f"SLURM_MPI_TYPE: {said}")
    chosen = mpi_mode(options.mpi, site)
    if chosen is not None:
        return chosen
    if not links_mpi(program_libraries(options.command[0], env.get("PATH", ""), cwd)):
        return False
    say(
        f"{options.command[0]} is linked to libmpi: its tasks start as one MPI job, "
        "through mpirun (--mpi=none: as separate tasks)"
    )
    return True


if __name__ == "__main__":
    sys.exit(main())
