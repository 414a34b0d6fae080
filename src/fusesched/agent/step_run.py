"""One job step through the controller's API, for :mod:`fusesched.agent.step` (``srun``
inside a job): ask for its share of the job's slots and start its tasks (:meth:`Step.create`,
falling back to what an older controller takes; not without the standard input it
forwards), then follow them (:meth:`Step.follow`):
their exit codes, and their output printed as it comes (``-l``: each line with its task's
rank) until each log is complete. :func:`say`, :func:`warn` and :func:`error` are srun's
messages on stderr.
"""

from __future__ import annotations

import contextlib
import signal
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial

import httpx

from fusesched.agent.step_answers import controller_detail, refuses_field
from fusesched.agent.step_gpus import GpuAsk
from fusesched.agent.step_het import HetShares
from fusesched.agent.step_mpi import label_line
from fusesched.agent.step_plan import StepError, StepLaunch, StepTask
from fusesched.agent.step_resources import without_refused

POLL_MIN_S = 0.05
POLL_MAX_S = 0.5
#: With a controller older than complete logs (no ``X-Log-Complete``): how long a task's
#: output must have been quiet after its exit before it is taken as whole.
DRAIN_QUIET_S = 0.6
#: After a signal: how long the step waits for its killed tasks to end.
STOP_WAIT_S = 15.0


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
        # srun's standard input for its tasks: the request's stdin fields (agent/step_stdin.py)
        self.stdin: dict[str, object] = {}
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
            body.update(self.gpus.fields())
        if self.name is not None:
            body["name"] = self.name
        body.update(self.resources)
        body.update(self.stdin)
        response = self.http.post(f"/v1/jobs/{self.job_id}/steps", json=body)
        refused = response.status_code == 422
        if refused and self.stdin and refuses_field(response, "stdin"):
            raise StepError(  # (going on without it would run the tasks on no input at all)
                "the controller is older than this srun: it cannot forward srun's standard "
                "input to the step's tasks; give -i none (or </dev/null) to run it without, "
                "or -i FILE for each task to read a file"
            )
        try:  # (a controller older than step CPUs: unpinned, as before; memory: refused)
            said = refused and without_refused(self.resources, partial(refuses_field, response))
        except ValueError as exc:
            raise StepError(str(exc)) from None
        if said:
            warn(said)
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
            warn(
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

    def follow(self, kill_on_bad_exit: bool, wait: int | None = None) -> list[int]:
        """Print the tasks' output until all have ended; their exit codes (rank order).
        ``wait`` (``-W``): once a task has ended, kill those still running that many
        seconds later (0 or None: never)."""
        pause = POLL_MIN_S
        stopping_at: float | None = None
        first_end: float | None = None
        while not all(r.done for r in self.running):
            if first_end is None and any(r.code is not None for r in self.running):
                first_end = time.monotonic()
            if wait and first_end is not None and time.monotonic() - first_end >= wait:
                self._waited(wait)
                first_end = float("inf")  # (said and killed once)
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

    def _waited(self, wait: int) -> None:
        """``-W``: the first task ended ``wait`` seconds ago; kill the others, as Slurm's
        srun says it."""
        left = [r for r in self.running if r.code is None]
        if not left:
            return
        say(f"First task exited {wait}s ago")
        for run in self.running:
            state = "running" if run.code is None else "exited"
            say(f"StepId={self.job_id}.{self.step_id} task {run.task.rank}: {state}")
        say(f"Terminating StepId={self.job_id}.{self.step_id}")
        self.kill(left)

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
                warn(
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


def say(message: str) -> None:
    print(f"srun: {message}", file=sys.stderr, flush=True)


def error(message: str) -> None:
    say(f"error: {message}")


def warn(message: str) -> None:
    say(f"warning: {message}")
