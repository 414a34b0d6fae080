"""Following every task's output of a job to its end (``fusesched run``).

One request a round reads the new output of all of the job's tasks (``POST
/v1/jobs/{id}/logs``), each from where the last read stopped, with whether each log is
complete: its agent said where it ends and all of it has arrived, or nothing more can come (the
task was lost with its node). So ``run`` stops exactly at the end of the output, however much
a task wrote just before it ended. A controller older than that route (405) is read as before
it, a task at a time, until no output has come for :data:`LEGACY_QUIET_S` after the job's end.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

#: With a controller older than complete logs: how long no new output must have come, after
#: the job's end, before its output is taken as whole.
LEGACY_QUIET_S = 1.5


class Sink(Protocol):
    """Where the text goes (``run``'s :class:`~fusesched.cli.srun.Output`)."""

    def add(self, index: int, text: str) -> None: ...


def task_index(task_id: str) -> int:
    """A task's index in the job (``<job>[-r<run>].main.<index>``)."""
    tail = task_id.rsplit(".", 1)[-1]
    return int(tail) if tail.isascii() and tail.isdigit() and len(tail) <= 18 else 0


@dataclass
class TaskOutput:
    """Where each task's log was read up to, and which logs are complete."""

    offsets: dict[str, int] = field(default_factory=dict)
    complete: set[str] = field(default_factory=set)
    unconfirmed: set[str] = field(default_factory=set)  # complete, but the end may be missing
    legacy: bool = False  # the controller is older than complete logs
    quiet_since: float | None = None  # (legacy) the job ended and no output came since

    def read(self, client: Any, job: dict[str, Any], out: Sink) -> bool:
        """Pass on what the job's tasks wrote since the last call; whether every task's log
        is complete (for a legacy controller: whether the job has ended and been quiet for
        :data:`LEGACY_QUIET_S`)."""
        from fusesched.sdk import ControllerError

        ids = [t["task_id"] for t in job.get("tasks") or []]
        if not self.legacy:
            try:
                return self._read_all(client, job["id"], ids, out)
            except ControllerError as exc:
                if exc.status != 405:  # (405: no such route; the job itself was just read)
                    raise
                self.legacy = True
        return self._read_each(client, job, ids, out)

    def _read_all(self, client: Any, job_id: str, ids: list[str], out: Sink) -> bool:
        while True:
            wanted = {t: self.offsets.get(t, 0) for t in ids if t not in self.complete}
            if not wanted:
                return True
            answer = client.task_logs(job_id, wanted)
            for entry in answer["tasks"]:
                task_id = entry["task_id"]
                out.add(task_index(task_id), entry["text"])
                self.offsets[task_id] = int(entry["next_offset"])
                if entry["complete"]:
                    self.complete.add(task_id)
                    if not entry["confirmed"]:
                        self.unconfirmed.add(task_id)
            if not answer.get("more"):
                return all(t in self.complete for t in ids)

    def _read_each(self, client: Any, job: dict[str, Any], ids: list[str], out: Sink) -> bool:
        from fusesched.sdk import FINISHED, ControllerError

        got = False
        for task_id in ids:
            try:
                text, self.offsets[task_id] = client.logs_from(
                    job["id"], task_id, self.offsets.get(task_id, 0)
                )
            except ControllerError as exc:
                if exc.status != 404:
                    raise
                continue  # nothing written yet (a task that writes nothing has no log)
            out.add(task_index(task_id), text)
            got = got or bool(text)
        if job["state"] not in FINISHED:
            return False
        now = time.monotonic()
        if got or self.quiet_since is None:
            self.quiet_since = now
        return now - self.quiet_since >= LEGACY_QUIET_S


def read_to_end(
    logs: TaskOutput,
    client: Any,
    job: dict[str, Any],
    out: Sink,
    sleep: Callable[[float], None] = time.sleep,
    poll_s: float = 0.05,
) -> None:
    """Read an ended job's output until every task's log is complete."""
    while not logs.read(client, job, out):
        sleep(poll_s)
