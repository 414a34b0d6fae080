"""Task logs on the controller's disk: one file per task, written at the offsets agents send,
and whether each log is complete.

Agents send each chunk with its byte offset, so a chunk sent twice (a retried heartbeat)
lands on the same bytes instead of being appended again. Once a task has ended and its agent
has sent all of its output, the agent sends a chunk with no data at the log's end: the end
mark (:class:`~fusesched.api.wire.LogChunk`). It is kept beside the log (``<task>.end``, the
log's length), so it outlives a controller restart. :func:`log_state` says from it, and from
what the controller knows of the task, whether more of a log may still come: readers (``run``,
``logs -f``, job steps) stop at the end of a complete log instead of waiting for quiet.

A mark that can never come (an agent older than marks, or one restarted since the task ended)
is not waited for by the clock: an agent speaks of an ended task in every beat until its mark
is delivered (its output, its exit, the mark), so once its node's agent has sent
:data:`SILENT_BEATS` beats that leave the task out, it has had its chance. A stalled
controller or a network hiccup delays beats, never declares a log complete; a node that stays
silent is declared lost, and its tasks' logs with it.

Folders are created mode 0700 and files mode 0600: only the controller reads them, and serves
each job's logs through the API to its tenant only.
"""

from __future__ import annotations

import contextlib
import os
import re
import threading
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from fusesched.agent.logtext import complete_utf8
from fusesched.api.wire import Heartbeat, LogChunk
from fusesched.model.node import NodeState

if TYPE_CHECKING:
    from fusesched.controller.service import Controller

_SAFE = re.compile(r"^[A-Za-z0-9_.-]+$")
_LONGEST = 200  # characters of a task id (a file name is at most 255 bytes)

#: A task that ended without an end mark has its log taken as complete, unconfirmed, once its
#: node's agent has sent this many beats since it last spoke of the task (an agent older than
#: marks has sent all of its output then; a restarted one forgot it). Two, not one: a beat put
#: together just before the task ended may arrive just after its exit report (an agent's two
#: threads each have one beat on the way at most). An agent that sends marks sends one with
#: the exit report, or right after the last of the output.
SILENT_BEATS = 2
#: End marks kept in memory (they are on disk; this spares reading them again), and tasks
#: whose agents' last word is remembered (a task forgotten is counted again from scratch).
_ENDS_KEPT = 100_000
_HEARD_KEPT = 100_000


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
        self._lock = threading.Lock()  # beats come under the controller's lock, reads do not
        self._beats: dict[str, tuple[int, int]] = {}  # per node: its beats, its full beats
        # per task: its node and that node's counts when its agent last spoke of it
        self._heard: dict[str, tuple[str, int, int]] = {}

    def path(self, task_id: str) -> Path:
        if not loggable(task_id):
            raise ValueError(f"bad task id {task_id[:_LONGEST]!r}")
        return self.root / job_of(task_id) / f"{task_id}.log"

    def write(self, chunk: LogChunk) -> None:
        """Write ``chunk`` at its offset; a chunk with no data is the task's end mark."""
        if not chunk.data:
            self.mark_end(chunk.task_id, chunk.offset)
            return
        path = self.create(chunk.task_id)
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
        self.create(task_id)
        mark = path.with_suffix(".end")
        fresh = mark.with_name(f".{mark.name}.new")
        fd = os.open(fresh, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w", encoding="ascii") as f:
            f.write(f"{length}\n")
        os.replace(fresh, mark)  # (a reader never sees half a mark)
        self._remember(task_id, length)

    def create(self, task_id: str) -> Path:
        """The task's log, created empty if it is not there yet (so that it is listed)."""
        path = self.path(task_id)
        path.parent.mkdir(mode=0o700, exist_ok=True)
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT, 0o600))
        return path

    def heard(self, beat: Heartbeat) -> None:
        """Count a beat of ``beat.node``'s agent, and the tasks it speaks of: their output
        or end mark, their reports, and (a full beat) those that run."""
        named = {c.task_id for c in beat.logs} | {r.task_id for r in beat.reports}
        named.update(beat.running or ())
        with self._lock:
            beats, full = self._beats.get(beat.node, (0, 0))
            beats, full = beats + 1, full + (beat.running is not None)
            self._beats[beat.node] = (beats, full)
            for task_id in named:
                self._heard.pop(task_id, None)  # (newest last: the oldest are let go first)
                self._heard[task_id] = (beat.node, beats, full)
            if len(self._heard) > _HEARD_KEPT:
                for task_id in list(self._heard)[: len(self._heard) - _HEARD_KEPT // 2]:
                    del self._heard[task_id]

    def silence(self, task_id: str, node: str) -> tuple[int, int]:
        """How many beats, and full beats, ``node``'s agent has sent since it last spoke of
        the task (counted from now when it has not since this controller started)."""
        with self._lock:
            now = self._beats.get(node, (0, 0))
            found = self._heard.get(task_id)
            if found is None or found[0] != node:
                self._heard[task_id] = (node, *now)
                return 0, 0
            return now[0] - found[1], now[1] - found[2]

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

    def job_parts(self, job_id: str, known: Iterable[str] = ()) -> list[str]:
        """The tasks whose logs make the job's log (:meth:`read_job`), in order: each run's
        first task (of those with a log, and of ``known``, the job's tasks the controller
        knows: a first task that has written nothing yet still comes first)."""
        names = set(self.tasks(job_id))
        names.update(t for t in known if job_of(t) == job_id and loggable(t))
        first: dict[int, str] = {}
        for task_id in sorted(names, key=task_order):
            remote, attempt, _, _ = task_order(task_id)
            if not remote:
                first.setdefault(attempt, task_id)
        return [t for _, t in sorted(first.items())]

    def read_job(self, job_id: str, offset: int = 0, final: bool = False) -> tuple[str, int]:
        """The job's log: its first task's, run after run (a requeued job's restarts append,
        as a requeued Slurm job's output file does); ``offset`` counts over the whole."""
        text, after, _ = self.read_parts(self.job_parts(job_id), offset, final)
        return text, after

    def read_parts(
        self, parts: Sequence[str], offset: int, final: bool, limit: int | None = None
    ) -> tuple[str, int, bool]:
        """The logs of ``parts`` one after another, from byte ``offset`` of the whole (only
        what lies past it is read: following a long log costs what is new), of at most
        ``limit`` bytes; and whether the text reaches the end of what is written (as
        :meth:`read_some`)."""
        data = bytearray()
        start = 0  # where the part begins in the whole
        at_end = True
        for task_id in parts:
            found = self.stat(task_id)
            size = found.st_size if found is not None else 0
            skip = max(0, offset - start)  # (of this part)
            if skip < size:
                with contextlib.suppress(FileNotFoundError), open(self.path(task_id), "rb") as f:
                    f.seek(skip)
                    # (the last part to its end; the others to the size they had above, so
                    # that what follows them stays where the offsets say)
                    last = task_id == parts[-1]
                    wanted = -1 if last else size - skip
                    room = None if limit is None else limit - len(data)
                    if room is not None and (last or wanted > room):
                        data += f.read(room)
                        at_end = last and not f.read(1)
                        break
                    data += f.read(wanted)
            start += size
        text, after = complete_text(bytes(data), offset, final and at_end)
        return text, after, at_end


def loggable(task_id: str) -> bool:
    """Whether ``task_id`` can name a log file (no other task's, no folder's)."""
    return (
        bool(_SAFE.fullmatch(task_id)) and not task_id.startswith(".") and len(task_id) <= _LONGEST
    )


def log_state(ctl: Controller, task_id: str, job_end: float | None) -> LogState:
    """Whether more of ``task_id``'s log may still come (``job_end``: when its job ended, on
    the controller's clock; ``None`` while it has not).

    Complete and confirmed: its agent sent the end mark and all of the log is here. Complete
    and unconfirmed (the end may be missing): the task was lost, its node is down or gone, it
    is not of its job's current run and this controller does not know it, or its job ended
    before this controller knew of it (after a restart, a heartbeat writes only the logs of
    tasks the controller knows, so no agent can add to them), or its agent has sent
    :data:`SILENT_BEATS` beats since it last spoke of the ended task (full beats, for a task
    not known to have ended whose job has: a helper still being stopped). Tasks an external
    pool ran are complete once ended (the controller copied the cluster's files itself), and
    so are tasks that never ran (no pid reported, no log). Ask before reading: a log complete
    before the read is whole in what the read returns.
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
        live = ctl.jobs.get(job_of(task_id))
        stale = live is not None and bool(live.tasks) and task_id not in live.tasks
        return UNCONFIRMED if job_end is not None or stale else OPEN
    if task.pool is not None:
        return COMPLETE
    if task.state == "exited" and task.pid is None and found is None:
        return COMPLETE  # never ran: stopped before an agent had it, or failed to start
    node = ctl.nodes.get(task.node)
    if task.lost or node is None or node.state is NodeState.DOWN:
        return UNCONFIRMED
    exited = task.state == "exited"
    if not exited and job_end is None:
        return OPEN
    beats, full = store.silence(task_id, task.node)
    return UNCONFIRMED if (beats if exited else full) >= SILENT_BEATS else OPEN


def complete_text(data: bytes, offset: int, final: bool = False) -> tuple[str, int]:
    """``data`` (read from byte ``offset``) as text, and the byte offset after what the text
    covers: a reader that follows a log asks for that offset next.

    A character whose last bytes have not been written yet (a chunk being written while it is
    read) is held back for the next read instead of being shown as U+FFFD and then skipped;
    once the log is ``final`` everything is shown. Agents send valid UTF-8 (agent/logtext.py),
    but a reader must not count on the text's length in bytes for the offset."""
    whole = data if final else complete_utf8(data)
    return whole.decode(errors="replace"), offset + len(whole)


_RESTART = re.compile(r"-r([0-9]{1,18})$")  # (ASCII digits: int() takes others, or fails)


def job_of(task_id: str) -> str:
    """The job a task id belongs to (``<job>[-r<attempt>].<group>.<index>``)."""
    return _RESTART.sub("", task_id.split(".", 1)[0])


def task_order(task_id: str) -> tuple[int, int, str, int]:
    """Tasks' sort key: the gang's before remote helpers, then by run, group and index."""
    parts = task_id.split(".")
    remote = 1 if len(parts) > 1 and parts[1] == "remote" else 0
    tail = parts[-1]
    index = int(tail) if tail.isascii() and tail.isdigit() and len(tail) <= 18 else 0
    restart = _RESTART.search(parts[0])
    attempt = int(restart.group(1)) if restart else 0
    return remote, attempt, ".".join(parts[1:-1]), index
