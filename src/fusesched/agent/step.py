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

What the step is to do (options, placement, each task's environment) is worked out
without I/O in :mod:`fusesched.agent.step_plan`.
"""

from __future__ import annotations

import contextlib
import os
import signal
import ssl
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from types import FrameType

import httpx

from fusesched.agent.mpi_program import program_libraries
from fusesched.agent.step_answers import controller_detail, refuses_field
from fusesched.agent.step_gpus import GpuAsk, gpu_ask
from fusesched.agent.step_het import HetShares, het_groups
from fusesched.agent.step_het_plan import HetStep, plan_het_step
from fusesched.agent.step_mpi import label_line, links_mpi, mpi_mode, mpirun_argv, mpirun_env
from fusesched.agent.step_plan import (
    StepError,
    StepLaunch,
    StepOptions,
    StepTask,
    exit_status,
    export_vars,
    mpi_listing,
    parse_args,
    place,
    read_hostfile,
    step_shape,
    step_slots,
    task_argv,
    task_env,
    unknown_mpi,
)
from fusesched.agent.step_resources import cpu_mem_fields, without_refused
from fusesched.client_base import default_token

POLL_MIN_S = 0.05
POLL_MAX_S = 0.5
#: With a controller older than complete logs (no ``X-Log-Complete``): how long a task's
#: output must have been quiet after its exit before it is taken as whole.
DRAIN_QUIET_S = 0.6
#: After a signal: how long the step waits for its killed tasks to end.
STOP_WAIT_S = 15.0
#: While the job's slots are busy: the first pause before asking again, and the longest.
RETRY_MIN_S = 0.1
RETRY_MAX_S = 0.5

# -- the step's process -------------------------------------------------------------------------


@dataclass
class _Running:
    task: StepTask
    task_id: str
    offset: int = 0
    partial: str = ""
    code: int | None = None
    reason: str = ""
    quiet_since: float | None = None  # exited and no new output since
    complete: bool = False  # its log is read to the end, and nothing more will come
    done: bool = False
    killed: bool = False
    notes: list[str] = field(default_factory=list)


class Step:
    """One step: its share of the job's slots and its tasks, through the controller's API.
    ``tagged``: its one task is mpirun, whose ``--tag-output`` lines carry the ranks."""

    def __init__(
        self,
        http: httpx.Client,
        job_id: str,
        label: bool,
        tagged: bool = False,
        gpus: GpuAsk | None = None,
        name: str | None = None,
        resources: dict[str, object] | None = None,
    ) -> None:
        self.http = http
        self.job_id = job_id
        self.label = label
        self.tagged = tagged
        self.gpus = gpus  # the step's GPUs (agent/step_gpus.py); None: none asked for
        self.name = name  # its name in accounting (None: a controller older than names)
        self.resources = resources or {}  # its CPUs and memory (agent/step_resources.py)
        # the controller is older than launch variables: they go in the tasks' command lines
        self.env_in_argv = False
        self.running: list[_Running] = []
        self.stop_signal: int | None = None
        self.step_id: int | None = None

    def create(
        self,
        slots: Mapping[str, int],
        overlap: bool,
        launches: Sequence[StepLaunch],
        het: HetShares | None = None,
    ) -> str | None:
        """Ask for the step (its slots per node) and start its tasks: None once it runs,
        else why it must wait (the job's slots are busy). :class:`StepError` for a refusal
        that waiting would not change. A controller that refuses the tasks' ``env`` as a
        field it does not know is older than launch variables: then they go as ``env
        NAME=value…`` in the tasks' command lines, said once."""
        body = {
            "slots": dict(slots),
            "overlap": overlap,
            "tasks": [launch.request(self.env_in_argv) for launch in launches],
        }
        if het is not None:  # (a heterogeneous job's step: its share of each component)
            body["het"] = [{"group": group, "slots": own} for group, own in het]
        if self.gpus is not None:
            body["gpus"] = self.gpus.per_node
            body["gpus_per_task"] = self.gpus.per_task
        if self.name is not None:
            body["name"] = self.name
        body.update(self.resources)
        response = self.http.post(f"/v1/jobs/{self.job_id}/steps", json=body)
        refused = response.status_code == 422
        try:  # (a controller older than step CPUs: unpinned, as before; memory: refused)
            said = refused and without_refused(self.resources, partial(refuses_field, response))
        except ValueError as exc:
            raise StepError(str(exc)) from None
        if said:
            _warn(said)
            return self.create(slots, overlap, launches, het)
        if refused and self.name is not None and refuses_field(response, "name"):
            self.name = None  # (a controller older than step names: the step goes unnamed)
            return self.create(slots, overlap, launches, het)
        if refused and self.gpus is not None and refuses_field(response, "gpus"):
            raise StepError(
                "the controller is older than this srun: it cannot give a step its own GPUs "
                "(--gres, --gpus, --gpus-per-task, --gpus-per-node)"
            )
        if response.status_code == 422 and het is not None and refuses_field(response, "het"):
            raise StepError(
                "the controller is older than this srun: it cannot run steps of heterogeneous jobs"
            )
        if response.status_code == 422 and not self.env_in_argv and refuses_field(response, "env"):
            self.env_in_argv = True
            _warn(
                "the controller is older than this srun: the step's variables go in its "
                "tasks' command lines (seen in ps on the nodes)"
            )
            return self.create(slots, overlap, launches, het)
        if response.status_code == 409:
            return controller_detail(response)
        if response.status_code == 404 and controller_detail(response) == "Not Found":
            raise StepError("the controller is older than this srun (it has no step route)")
        if response.status_code >= 400:
            raise StepError(f"cannot start the step: {controller_detail(response)}")
        created = response.json()
        self.step_id = int(created["step_id"])
        self.running = [
            _Running(launch.task, task_id)
            for launch, task_id in zip(launches, created["task_ids"], strict=True)
        ]
        return None

    def kill(self, which: Sequence[_Running]) -> None:
        for run in which:
            if run.code is None and not run.killed:
                run.killed = True
                with contextlib.suppress(httpx.HTTPError):
                    self.http.delete(f"/v1/tasks/{run.task_id}")

    def follow(self, kill_on_bad_exit: bool) -> list[int]:
        """Print the tasks' output until all have ended; their exit codes (rank order)."""
        pause = POLL_MIN_S
        stopping_at: float | None = None
        while not all(r.done for r in self.running):
            if self.stop_signal is not None and stopping_at is None:
                stopping_at = time.monotonic()
                self.kill(self.running)
            if stopping_at is not None and time.monotonic() - stopping_at > STOP_WAIT_S:
                break
            changed = False
            for run in self.running:
                if run.done:
                    continue
                if run.code is None:
                    changed |= self._status(run)
                    if run.code not in (None, 0) and kill_on_bad_exit:
                        self.kill(self.running)
                changed |= self._output(run)
            pause = POLL_MIN_S if changed else min(pause * 2, POLL_MAX_S)
            if not all(r.done for r in self.running):
                time.sleep(pause)
        for run in self.running:
            self._flush(run)
        return [r.code if r.code is not None else 128 + signal.SIGKILL for r in self.running]

    def _status(self, run: _Running) -> bool:
        try:
            response = self.http.get(f"/v1/tasks/{run.task_id}")
        except httpx.HTTPError as exc:
            run.notes.append(str(exc))
            return False
        if response.status_code in (401, 404):  # the job ended, its credential with it
            run.code, run.done = 128 + signal.SIGKILL, True
            return True
        if response.status_code >= 400:
            return False
        body = response.json()
        if body.get("state") != "exited":
            return False
        code = body.get("exit_code")
        run.code = int(code) if code is not None else 255
        run.reason = str(body.get("reason") or "")
        run.quiet_since = time.monotonic()
        return True

    def _output(self, run: _Running) -> bool:
        """Print the task's new output; whether anything changed. A task that has exited is
        done once its log is complete (the controller's ``X-Log-Complete``: all of it has
        arrived, or nothing more can come): at once. A controller older than that header
        says nothing: then once no output has come for :data:`DRAIN_QUIET_S` after the exit."""
        changed = False
        says = True
        if not run.complete:
            changed, says = self._read(run)
        if run.quiet_since is None:  # not exited yet: its exit code is still to come
            return changed
        if run.complete or (not says and time.monotonic() - run.quiet_since >= DRAIN_QUIET_S):
            run.done = True
            return True
        return changed

    def _read(self, run: _Running) -> tuple[bool, bool]:
        """Read and print what the task wrote since the last read: whether there was any
        (or the log just became complete), and whether the controller says when a log is
        complete."""
        try:
            response = self.http.get(
                f"/v1/jobs/{self.job_id}/logs",
                params={"task": run.task_id, "offset": run.offset},
            )
        except httpx.HTTPError:
            return False, True
        said = response.headers.get("x-log-complete")
        if response.status_code != 200:
            return False, said is not None
        text = response.text
        run.offset = int(response.headers.get("x-next-offset", run.offset + len(text)))
        if text:
            self._print(run, text)
            if run.quiet_since is not None:
                run.quiet_since = time.monotonic()
        if said == "true":
            run.complete = True
            if response.headers.get("x-log-confirmed") != "true":
                _warn(
                    f"task {run.task.rank} on {run.task.node}: its output may be missing its "
                    "end (its agent did not confirm it: lost with its node, or too old to say)"
                )
        return bool(text) or run.complete, said is not None

    def _print(self, run: _Running, text: str) -> None:
        lines = (run.partial + text).split("\n")
        run.partial = lines.pop()
        if lines:
            sys.stdout.write("".join(f"{self._labelled(run, line)}\n" for line in lines))
            sys.stdout.flush()

    def _flush(self, run: _Running) -> None:
        if run.partial:
            sys.stdout.write(f"{self._labelled(run, run.partial)}\n")
            sys.stdout.flush()
            run.partial = ""

    def _labelled(self, run: _Running, line: str) -> str:
        if self.tagged:
            return label_line(line) if self.label else line
        return f"{run.task.rank}: {line}" if self.label else line


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    listing = mpi_listing(args)
    if listing is not None:  # srun --mpi=list: no step
        print(listing, end="")
        return 0
    try:
        options = parse_args(args)
    except StepError as exc:
        _error(str(exc))
        return 2
    env = os.environ
    job_id = env.get("FUSESCHED_JOB_ID")
    url = env.get("FUSESCHED_CONTROLLER")
    if not job_id or not url:
        _error(
            "not inside a fusesched job (FUSESCHED_JOB_ID and FUSESCHED_CONTROLLER are unset): "
            "this srun runs job steps of fusesched batch jobs and salloc allocations only"
        )
        return 2
    hostfile = env.get("FUSESCHED_HOSTFILE", "")
    try:
        hosts = read_hostfile(Path(hostfile).read_text(encoding="utf-8"))
    except OSError:
        _error(
            f"no hostfile at {hostfile or '$FUSESCHED_HOSTFILE'}: srun runs in the batch "
            "script of a job (sbatch), on its first node, or under fusesched salloc"
        )
        return 2
    het: HetStep | None = None
    try:
        groups = het_groups(options.het_groups, env)
        if groups is None:
            ntasks, nodes = step_shape(options, env, len(hosts))
            tasks, warnings = place(hosts, ntasks, nodes, options.ntasks_per_node)
        else:  # a heterogeneous job's step: over its components' own hostfiles
            het = plan_het_step(options, env, hostfile, groups)
            tasks, warnings = het.tasks, het.warnings
        exported = export_vars(options.export or "ALL", env)
    except StepError as exc:
        _error(str(exc))
        return 2
    for warning in (*options.warnings, *warnings):
        _warn(warning)
    cwd = os.getcwd()
    if options.pty:  # one task on a terminal relayed to this one
        from fusesched.agent.step_pty import run_on_terminal

        return run_on_terminal(options, env, tasks, exported, cwd, step_name(options))
    mpi = _through_mpirun(options, env, cwd)
    try:
        gpus = gpu_ask(options, step_slots(tasks), mpi)
        resources = cpu_mem_fields(options, env, step_slots(tasks))
    except ValueError as exc:
        _error(str(exc))
        return 2
    exported, own_env = het.envs(exported, env, mpi) if het is not None else (exported, [])
    launches = _launches(options, env, tasks, exported, cwd, mpi, own_env)
    # the job's own credential in its batch script; under salloc (no job credential), the
    # user's, as every fusesched command finds it: the owner may run steps of their own job
    token = env.get("FUSESCHED_JOB_TOKEN") or default_token()
    headers = {"authorization": f"Bearer {token}"} if token else {}
    ca = env.get("FUSESCHED_CA")
    verify: ssl.SSLContext | bool = ssl.create_default_context(cafile=ca) if ca else True
    with httpx.Client(
        base_url=url.rstrip("/"), timeout=30.0, headers=headers, verify=verify
    ) as http:
        step = Step(http, job_id, options.label, mpi, gpus, step_name(options), resources)

        def stop(signum: int, _frame: FrameType | None) -> None:
            step.stop_signal = signum

        for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            signal.signal(signum, stop)
        try:
            shares = het.shares if het is not None else None
            refused = _create(step, step_slots(tasks), options, launches, shares)
        except (StepError, httpx.HTTPError) as exc:
            _error(str(exc))
            return 1
        if refused is not None:
            return refused
        codes = step.follow(options.kill_on_bad_exit)
        for run in step.running:
            if run.code not in (None, 0):
                why = f" ({run.reason})" if run.reason and run.reason != "exited" else ""
                code = exit_status([run.code])
                who = "mpirun" if mpi else f"task {run.task.rank}"
                _error(f"{who} on {run.task.node}: exited with exit code {code}{why}")
    if step.stop_signal is not None:
        return 128 + step.stop_signal
    return exit_status(codes)


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
    job_id = step.job_id
    waited = False
    pause = RETRY_MIN_S
    deadline = None if options.immediate is None else time.monotonic() + options.immediate
    while True:
        if step.stop_signal is not None:
            return 128 + step.stop_signal
        busy = step.create(slots, options.overlap, launches, het)
        if busy is None:
            if waited:
                _say(f"Step created for StepId={job_id}.{step.step_id}")
            return None
        if deadline is not None and time.monotonic() >= deadline:
            _error(f"Unable to create step for job {job_id}: {busy}")
            return 1
        if not waited:
            _say(f"Job {job_id} step creation temporarily disabled, retrying ({busy})")
            waited = True
        time.sleep(pause)
        pause = min(pause * 2, RETRY_MAX_S)


def _launches(
    options: StepOptions,
    env: Mapping[str, str],
    tasks: Sequence[StepTask],
    exported: Mapping[str, str],
    cwd: str,
    mpi: bool,
    own_env: Sequence[Mapping[str, str]] = (),
) -> list[StepLaunch]:
    """What the step starts: each of its tasks (with its own variables ``own_env[rank]``,
    if given: a heterogeneous job's component's), or (``mpi``) one mpirun on its first node
    that starts them all as one MPI job (its ranks get the variables from mpirun's own,
    ``-x NAME``)."""
    if not mpi:
        argv = task_argv(cwd, options.command)
        return [
            StepLaunch(
                task,
                argv,
                {**exported, **(own_env[task.rank] if own_env else {})}
                | task_env(task, tasks, options.cpus_per_task),
            )
            for task in tasks
        ]
    launcher = env.get("OMPI_MCA_plm_rsh_agent") or f"{sys.executable} -m fusesched.agent.remote"
    own, passed = mpirun_env(exported, env, tasks, options.cpus_per_task, launcher)
    command = mpirun_argv(tasks, passed, options.label, options.command)
    return [StepLaunch(tasks[0], task_argv(cwd, command), own)]


def step_name(options: StepOptions) -> str:
    """The step's name in accounting: ``-J``, else its command's base name (as Slurm's), cut
    to the controller's limit (a program's file name may be longer)."""
    name = options.job_name or os.path.basename(options.command[0]) or options.command[0]
    return name[:200]  # (StepRequest's limit: api/schemas.py)


def _through_mpirun(options: StepOptions, env: Mapping[str, str], cwd: str) -> bool:
    """Whether the step runs through mpirun: ``--mpi``, else ``$SLURM_MPI_TYPE``, else
    whether its program is linked to libmpi (said once on stderr)."""
    site = env.get("SLURM_MPI_TYPE") or None
    if options.mpi is None and site is not None:
        said = unknown_mpi(site)
        if said is not None:
            _warn(f"SLURM_MPI_TYPE: {said}")
    chosen = mpi_mode(options.mpi, site)
    if chosen is not None:
        return chosen
    if not links_mpi(program_libraries(options.command[0], env.get("PATH", ""), cwd)):
        return False
    _say(
        f"{options.command[0]} is linked to libmpi: its tasks start as one MPI job, "
        "through mpirun (--mpi=none: as separate tasks)"
    )
    return True


def _say(message: str) -> None:
    print(f"srun: {message}", file=sys.stderr, flush=True)


def _error(message: str) -> None:
    _say(f"error: {message}")


def _warn(message: str) -> None:
    _say(f"warning: {message}")


# -- the wrapper on tasks' PATH -----------------------------------------------------------------


if __name__ == "__main__":
    sys.exit(main())
