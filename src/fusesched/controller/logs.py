"""Task logs on the controller's disk: one file per task, written at the offsets agents send,
and whether each log is complete.

Agents send each chunk with its byte offset, so a chunk sent twice (a retried heartbeat)
lands on the same bytes instead of being appended again. Once a task has ended and its agent
has sent all of its output, the agent sends a chunk with no data at the log's end: the end
mark (:class:`~fusesched.api.wire.LogChunk`). It is kept beside the log (``<task>.end``, the
log's length), so it outlives a controller restart. :func:`log_state` says from it, and from
what the controller knows of the task, whether more of a log may still come: readers (``run``,
``logs -f``, job steps) stop at the end of a complete log instead of waiting for quiet.

Folders are created mode 0700 and files mode 0600: only the controller reads them, and serves
each job's logs through the API to its tenant only.
"""

from __future__ import annotations

import contextlib
import os
import re
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from fusesched.agent.logtext import complete_utf8
from fusesched.api.wire import LogChunk
from fusesched.model.node import NodeState

if TYPE_CHECKING:
    from fusesched.controller.service import Controller

_SAFE = re.compile(r"^[A-Za-z0-9_.-]+$")

#: A task that ended without an end mark (its agent is older than end marks, or went away
#: before sending it) has its log taken as complete, unconfirmed, once nothing has been
#: written to it for this long since its end: the bounded wait of readers when the mark can
#: never come. An agent that sends marks sends one with the exit report, or right after the
#: last of the output.
UNCONFIRMED_AFTER_S = 3.0
#: End marks kept in memory (they are on disk; this spares reading them again).
_ENDS_KEPT = 100_000


@dataclass(frozen=True, slots=True)
class LogState:
    """Whether more of a task's log may come."""

    complete: bool  # nothing more will be written to it
    confirmed: bool = False  # complete because its agent said where it ends (all of it is here)


#: More may come (the task runs, or its agent is still sending what it wrote).
OPEN = LogState(False)
#: Its agent said where it ends, and all of it is here.
COMPLETE = LogState(True, True)
#: Nothing more will come, but no agent said where it ends: the end of the output may be
#: missing (its agent was lost, or is older than end marks).
UNCONFIRMED = LogState(True, False)


class LogStore:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.root.mkdir(mode=0o700, parents=True, exist_ok=True)
        os.chmod(self.root, 0o700)
        self._ends: dict[str, int] = {}  # end marks read or written (they never change)

    def path(self, task_id: str) -> Path:
        if not _SAFE.fullmatch(task_id) or task_id.startswith("."):
            raise ValueError(f"bad task id {task_id!r}")
        return self.root / job_of(task_id) / f"{task_id}.log"

    def write(self, chunk: LogChunk) -> None:
        """Write ``chunk`` at its offset; a chunk with no data is the task's end mark."""
        if not chunk.data:
            self.mark_end(chunk.task_id, chunk.offset)
            return
        path = self.path(chunk.task_id)
        path.parent.mkdir(mode=0o700, exist_ok=True)
        data = chunk.data.encode()
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
        with os.fdopen(fd, "r+b") as f:
            f.seek(chunk.offset)
            f.write(data)

    def mark_end(self, task_id: str, length: int) -> None:
        """Record that the task's log is complete at ``length`` bytes (its agent sent all of
        it). The log is created empty if the task wrote nothing, so that it is listed."""
        path = self.path(task_id)
        if self._ends.get(task_id) == length:
            return  # (sent again: a retried heartbeat)
        path.parent.mkdir(mode=0o700, exist_ok=True)
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT, 0o600))
        mark = path.with_suffix(".end")
        fresh = mark.with_name(f".{mark.name}.new")
        fd = os.open(fresh, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w", encoding="ascii") as f:
            f.write(f"{length}\n")
        os.replace(fresh, mark)  # (a reader never sees half a mark)
        self._remember(task_id, length)

    def end(self, task_id: str) -> int | None:
        """The length its agent said the task's log has, once complete; ``None``: not said."""
        known = self._ends.get(task_id)
        if known is not None:
            return known
        try:
            text = self.path(task_id).with_suffix(".end").read_text(encoding="ascii").strip()
        except (OSError, UnicodeDecodeError):
            return None
        if not text.isdigit():
            return None
        self._remember(task_id, int(text))
        return int(text)

    def _remember(self, task_id: str, length: int) -> None:
        if len(self._ends) >= _ENDS_KEPT:  # (a cache: the marks are on disk)
            self._ends.clear()
        self._ends[task_id] = length

    def stat(self, task_id: str) -> os.stat_result | None:
        """The task's log file's status (its size and when it was last written); ``None``: no
        log yet."""
        with contextlib.suppress(OSError):
            return self.path(task_id).stat()
        return None

    def tasks(self, job_id: str) -> list[str]:
        folder = self.root / job_id
        if not _SAFE.fullmatch(job_id) or not folder.is_dir():
            return []
        names = [p.stem for p in folder.glob("*.log")]
        return sorted(names, key=task_order)

    def read(self, task_id: str, offset: int = 0, final: bool = False) -> tuple[str, int]:
        """The task's log from byte ``offset`` on, and the offset to read from next
        (:func:`complete_text`)."""
        text, after, _ = self.read_some(task_id, offset, final)
        return text, after

    def read_some(
        self, task_id: str, offset: int = 0, final: bool = False, limit: int | None = None
    ) -> tuple[str, int, bool]:
        """:meth:`read`, of at most ``limit`` bytes; and whether the text reaches the end of
        what is written (only then is ``final`` applied: a text cut short holds back an
        unfinished character as a log being written does)."""
        path = self.path(task_id)
        try:
            f = open(path, "rb")  # noqa: SIM115 (closed below; a missing log is empty)
        except FileNotFoundError:
            return "", offset, True
        with f:
            f.seek(offset)
            data = f.read() if limit is None else f.read(limit)
            at_end = limit is None or len(data) < limit or not f.read(1)
        text, after = complete_text(data, offset, final and at_end)
        return text, after, at_end

    def job_parts(self, job_id: str) -> list[str]:
        """The tasks whose logs make the job's log (:meth:`read_job`), in order."""
        first: dict[int, str] = {}
        for task_id in self.tasks(job_id):
            remote, attempt, _, _ = task_order(task_id)
            if not remote:
                first.setdefault(attempt, task_id)
        return [t for _, t in sorted(first.items())]

    def read_job(self, job_id: str, offset: int = 0, final: bool = False) -> tuple[str, int]:
        """The job's log: its first task's, run after run (a requeued job's restarts append,
        as a requeued Slurm job's output file does); ``offset`` counts over the whole."""
        data = b"".join(self.path(t).read_bytes() for t in self.job_parts(job_id))
        return complete_text(data[offset:], offset, final)


def log_state(ctl: Controller, task_id: str, job_end: float | None) -> LogState:
    """Whether more of ``task_id``'s log may still come (``job_end``: when its job ended, on
    the controller's clock; ``None`` while it has not).

    Complete and confirmed: its agent sent the end mark and all of the log is here. Complete
    and unconfirmed (the end may be missing): the task was lost, its node is down or gone, its
    job ended before this controller knew of it (after a restart, a heartbeat writes only the
    logs of tasks the controller knows, so no agent can add to it), or its agent sent neither
    a mark nor output for :data:`UNCONFIRMED_AFTER_S` after the task's end (or its job's, for
    a helper still being stopped as its job ended). Tasks an external pool ran are complete
    once ended (the controller copied the cluster's files itself), and so are tasks that
    never ran (no pid reported, no log). Ask before reading: a log complete before the read
    is whole in what the read returns.
    """
    store = ctl.logs
    entry = ctl.tasks.get(task_id)
    if entry is not None and entry[1].state != "exited":
        return OPEN  # it runs
    mark = store.end(task_id)
    found = store.stat(task_id)
    if mark is not None and (found.st_size if found is not None else 0) >= mark:
        return COMPLETE
    task = entry[1] if entry is not None else ctl.finished.get(task_id)
    if task is None:  # not a task this controller runs or ran
        return OPEN if job_end is None else UNCONFIRMED
    if task.pool is not None:
        return COMPLETE
    if task.state == "exited" and task.pid is None and found is None:
        return COMPLETE  # never ran: stopped before an agent had it, or failed to start
    node = ctl.nodes.get(task.node)
    if task.lost or node is None or node.state is NodeState.DOWN:
        return UNCONFIRMED
    ended = task.end_time if task.state == "exited" and task.end_time is not None else job_end
    if ended is None:
        return OPEN
    quiet = found is None or time.time() - found.st_mtime >= UNCONFIRMED_AFTER_S
    if quiet and ctl.clock() - ended >= UNCONFIRMED_AFTER_S:
        return UNCONFIRMED
    return OPEN


def complete_text(data: bytes, offset: int, final: bool = False) -> tuple[str, int]:
    """``data`` (read from byte ``offset``) as text, and the byte offset after what the text
    covers: a reader that follows a log asks for that offset next.

    A character whose last bytes have not been written yet (a chunk being written while it is
    read) is held back for the next read instead of being shown as U+FFFD and then skipped;
    once the log is ``final`` everything is shown. Agents send valid UTF-8 (agent/logtext.py),
    but a reader must not count on the text's length in bytes for the offset."""
    whole = data if final else complete_utf8(data)
    return whole.decode(errors="replace"), offset + len(whole)


_RESTART = re.compile(r"-r(\d+)$")


def job_of(task_id: str) -> str:
    """The job a task id belongs to (``<job>[-r<attempt>].<group>.<index>``)."""
    return _RESTART.sub("", task_id.split(".", 1)[0])


def task_order(task_id: str) -> tuple[int, int, str, int]:
    """Tasks' sort key: the gang's before remote helpers, then by run, group and index."""
    parts = task_id.split(".")
    remote = 1 if len(parts) > 1 and parts[1] == "remote" else 0
    index = int(parts[-1]) if parts[-1].isdigit() else 0
    restart = _RESTART.search(parts[0])
    attempt = int(restart.group(1)) if restart else 0
    return remote, attempt, ".".join(parts[1:-1]), index
