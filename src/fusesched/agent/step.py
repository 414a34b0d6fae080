"""``srun`` inside a fusesched batch job: ``python -m fusesched.agent.step [OPTIONS] COMMAND...``.

A batch script runs once, on the first node of its allocation; Slurm scripts start their work
with ``srun``, which runs COMMAND as N tasks over the allocation (a *job step*). This module
is that: the agent puts it on the PATH of ``slurm_env`` jobs' tasks as ``srun``
(:mod:`fusesched.agent.step_wrapper`). Every task of the step, those on the first node
included, is started through the controller's remote route (``POST /v1/jobs/{id}/remote``,
with the job's own credential, as ``mpirun``'s launcher does), so each runs as a task of the job
(``<job>.remote.<k>``) on its node, outside the batch task's CPU pinning and memory cgroup
(which are one task's share), is killed with the job, and has its output kept by the
controller. The step follows each task's output through the log route and prints it (``-l``:
each line prefixed with the task's rank), and exits 0 if every task exited 0, else with the
highest exit code (a task killed by signal N counts as 128+N).

Placement: N tasks (``-n``, else ``$SLURM_NTASKS``) over the hostfile's nodes in allocation
order (``-N``, else ``$SLURM_NNODES``: the first N, each getting at least one task;
``--ntasks-per-node``: at most that many per node), filling each node's slots before the next
(Slurm's default block distribution).

What the step is to do (options, placement, each task's environment) is worked out
without I/O in :mod:`fusesched.agent.step_plan`.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import signal
import ssl
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType

import httpx

from fusesched.agent.step_plan import (
    StepError,
    StepTask,
    exit_status,
    export_vars,
    parse_args,
    place,
    read_hostfile,
    step_shape,
    task_argv,
    task_env,
)

#: Counter of the steps a batch task has started (in its own folder).
STEP_COUNTER = ".fusesched-steps"
POLL_MIN_S = 0.05
POLL_MAX_S = 0.5
#: With a controller older than complete logs (no ``X-Log-Complete``): how long a task's
#: output must have been quiet after its exit before it is taken as whole.
DRAIN_QUIET_S = 0.6
#: After a signal: how long the step waits for its killed tasks to end.
STOP_WAIT_S = 15.0

# -- the step's process -------------------------------------------------------------------------


def next_step_id(task_dir: str | None) -> int:
    """0, 1, 2… per step of the batch task (a locked counter file in its folder)."""
    if not task_dir:
        return 0
    path = Path(task_dir) / STEP_COUNTER
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)
    except OSError:
        return 0
    with os.fdopen(fd, "r+", encoding="ascii") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        text = f.read().strip()
        current = int(text) if text.isdigit() else 0
        f.seek(0)
        f.truncate()
        f.write(f"{current + 1}\n")
    return current


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
    """One running step: its tasks through the controller's API."""

    def __init__(self, http: httpx.Client, job_id: str, label: bool) -> None:
        self.http = http
        self.job_id = job_id
        self.label = label
        self.running: list[_Running] = []
        self.stop_signal: int | None = None

    def launch(self, task: StepTask, argv: list[str]) -> None:
        response = self.http.post(
            f"/v1/jobs/{self.job_id}/remote", json={"node": task.node, "argv": argv}
        )
        if response.status_code >= 400:
            raise StepError(f"cannot start task {task.rank} on {task.node}: {_detail(response)}")
        self.running.append(_Running(task, response.json()["task_id"]))

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
            prefix = f"{run.task.rank}: " if self.label else ""
            sys.stdout.write("".join(f"{prefix}{line}\n" for line in lines))
            sys.stdout.flush()

    def _flush(self, run: _Running) -> None:
        if run.partial:
            prefix = f"{run.task.rank}: " if self.label else ""
            sys.stdout.write(f"{prefix}{run.partial}\n")
            sys.stdout.flush()
            run.partial = ""


def _detail(response: httpx.Response) -> str:
    try:
        body = response.json()
    except ValueError:
        return response.text.strip() or f"HTTP {response.status_code}"
    detail = body.get("detail") if isinstance(body, dict) else None
    return str(detail) if detail else response.text.strip()


def _error(message: str) -> None:
    print(f"srun: error: {message}", file=sys.stderr, flush=True)


def _warn(message: str) -> None:
    print(f"srun: warning: {message}", file=sys.stderr, flush=True)


def main(argv: list[str] | None = None) -> int:
    try:
        options = parse_args(sys.argv[1:] if argv is None else argv)
    except StepError as exc:
        _error(str(exc))
        return 2
    env = os.environ
    job_id = env.get("FUSESCHED_JOB_ID")
    url = env.get("FUSESCHED_CONTROLLER")
    if not job_id or not url:
        _error(
            "not inside a fusesched job (FUSESCHED_JOB_ID and FUSESCHED_CONTROLLER are unset): "
            "this srun runs job steps of fusesched batch jobs only"
        )
        return 2
    hostfile = env.get("FUSESCHED_HOSTFILE", "")
    try:
        hosts = read_hostfile(Path(hostfile).read_text(encoding="utf-8"))
    except OSError:
        _error(
            f"no hostfile at {hostfile or '$FUSESCHED_HOSTFILE'}: srun runs in the batch "
            "script of a job (sbatch), on its first node"
        )
        return 2
    ntasks, nodes = step_shape(options, env, len(hosts))
    try:
        tasks, warnings = place(hosts, ntasks, nodes, options.ntasks_per_node)
        exported = export_vars(options.export or "ALL", env)
    except StepError as exc:
        _error(str(exc))
        return 2
    for warning in (*options.warnings, *warnings):
        print(f"srun: warning: {warning}", file=sys.stderr, flush=True)
    step_id = next_step_id(env.get("FUSESCHED_TASK_DIR"))
    cwd = os.getcwd()
    token = env.get("FUSESCHED_JOB_TOKEN")
    headers = {"authorization": f"Bearer {token}"} if token else {}
    ca = env.get("FUSESCHED_CA")
    verify: ssl.SSLContext | bool = ssl.create_default_context(cafile=ca) if ca else True
    with httpx.Client(
        base_url=url.rstrip("/"), timeout=30.0, headers=headers, verify=verify
    ) as http:
        step = Step(http, job_id, options.label)

        def stop(signum: int, _frame: FrameType | None) -> None:
            step.stop_signal = signum

        for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            signal.signal(signum, stop)
        try:
            for task in tasks:
                if step.stop_signal is not None:
                    break
                own = exported | task_env(task, tasks, step_id, options.cpus_per_task)
                step.launch(task, task_argv(own, cwd, options.command))
        except (StepError, httpx.HTTPError) as exc:
            _error(str(exc))
            step.kill(step.running)
            return 1
        codes = step.follow(options.kill_on_bad_exit)
        for run in step.running:
            if run.code not in (None, 0):
                why = f" ({run.reason})" if run.reason and run.reason != "exited" else ""
                code = exit_status([run.code])
                _error(
                    f"task {run.task.rank} on {run.task.node}: exited with exit code {code}{why}"
                )
    if step.stop_signal is not None:
        return 128 + step.stop_signal
    return exit_status(codes)


# -- the wrapper on tasks' PATH -----------------------------------------------------------------


if __name__ == "__main__":
    sys.exit(main())
