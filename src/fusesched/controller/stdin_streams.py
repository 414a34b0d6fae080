"""The controller's relay of ``srun``'s standard input to its step's tasks, as it comes (Slurm's
srun streams it: agent/step_stdin.py): one stream per ``srun`` whose input has not ended when
its step starts, kept in memory, written by that ``srun`` (agent/stdin_forward.py) and read
by each task that gets it, through the reader its command starts behind
(:mod:`fusesched.stdin_pump`), on whichever node it runs: both ends call the controller
(:mod:`fusesched.api.stdin_routes`), as the ``--pty`` relay's do.

A stream is one byte sequence with offsets, read by several readers (the tasks, named by
their task ids), each at its own pace. It holds the bytes from the lowest offset a live
reader has asked for (a read at an offset acknowledges what is before it) up to
:data:`MAX_BUFFER` bytes: a writer with no room waits (long polls), and so does ``srun``'s
reading of its own standard input, as a pipe makes its writer wait. A reader whose task has
ended holds nothing back (the routes ask the controller which tasks still run, at most every
:data:`CHECK_EVERY_S`), and once every reader's task has ended the writer is told
(``ended``): it stops forwarding.

The writer says when its input ends (``eof``): each reader gets the end once it has read
the rest. A writer not heard from for :data:`WRITER_GONE_S` (``srun`` sends an empty chunk
every few seconds while its input is quiet) is taken for gone: the readers get the end there,
told it was cut short (``lost``), rather than waiting for ever.

A controller that restarts (or a standby that takes over) has no streams: each end goes on
calling with its offsets, and a stream unknown to the controller is made anew (its job's and
id's) at the first call. The writer keeps what the readers have not all acknowledged (each
answer says how far that is: ``acked``) and says from where it keeps it (``kept``): the new
stream starts there and the writer is asked to send again from it, so that nothing is lost
or given twice. The streams are on no disk: nothing in one outlives what its ends keep.

Everything here runs on the server's event loop (the routes are coroutines), which alone
touches the streams; what the controller knows is asked for in the routes' thread pool.
"""

from __future__ import annotations

import asyncio
import re
import secrets
import time
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Final

from fusesched.controller.changes import Changes

if TYPE_CHECKING:
    from fusesched.controller.service import Controller

#: The most bytes a stream holds that a live reader has not read yet.
MAX_BUFFER: Final = 1024 * 1024
#: The most bytes one write may carry, and one read gives.
MAX_CHUNK: Final = 256 * 1024
#: The longest a long poll waits (seconds).
MAX_WAIT_S: Final = 25.0
#: A stream whose writer has not called for this long ends for its readers (seconds).
WRITER_GONE_S: Final = 60.0
#: How often, at most, a stream asks the controller which of its readers' tasks still run.
CHECK_EVERY_S: Final = 2.0
#: A stream all of whose readers have read its end is dropped this long after (seconds).
DONE_KEEP_S: Final = 30.0
#: A stream nobody has called about for this long is dropped (seconds).
STALE_S: Final = 300.0
#: The most streams a job may hold at once.
MAX_STREAMS_PER_JOB: Final = 64
#: What a stream's id may be (:meth:`StdinStreams.new` makes 16 hex digits).
STREAM_ID: Final = re.compile(r"^[A-Za-z0-9_-]{1,64}$")

#: Which of these task ids are of no running task (a callable of the routes').
Gone = Callable[[frozenset[str]], Awaitable[set[str]]]


class StreamGap(ValueError):
    """An offset outside what a stream holds (a read before what every reader acknowledged,
    a write past its end that the writer cannot send again), or a reader the stream does not
    have: the caller's bug, or a stream lost with a controller whose ends came back too far
    apart."""


class TooManyStreams(ValueError):
    """A job holds :data:`MAX_STREAMS_PER_JOB` streams already."""


@dataclass(frozen=True, slots=True)
class Written:
    """What a write gives back: the offset to send from next (the end of what the stream
    holds: maybe before the writer's, to send again from there), how far every live reader
    has read (``acked``: the writer may forget what is before it), whether every reader's
    task has ended (``ended``: stop forwarding) and whether the stream knows its readers
    (``readers``: else name them in the next write)."""

    offset: int
    acked: int
    ended: bool
    readers: bool


@dataclass(frozen=True, slots=True)
class Chunk:
    """What a read gives: the bytes, the offset to read from next, whether the input ends
    there (``eof``), and whether that end is the writer's loss rather than its input's end
    (``lost``)."""

    data: bytes
    offset: int
    eof: bool
    lost: bool = False


@dataclass(eq=False)
class StdinStream:
    """One ``srun``'s standard input: ``data`` holds its bytes from offset ``base`` on;
    ``anchored``: a writer has said where it starts; ``readers``: the task ids that read it
    (None: the writer has not named them yet), ``offsets`` how far each has asked for and
    ``gone`` those whose tasks have ended."""

    job_id: str
    stream_id: str
    clock: Callable[[], float] = time.monotonic
    base: int = 0
    data: bytearray = field(default_factory=bytearray)
    anchored: bool = False
    eof: bool = False
    readers: frozenset[str] | None = None
    offsets: dict[str, int] = field(default_factory=dict)
    gone: set[str] = field(default_factory=set)
    writer_seen: float = 0.0
    touched: float = 0.0
    checked: float | None = None
    done_at: float | None = None
    _changes: Changes = field(default_factory=Changes)

    def __post_init__(self) -> None:
        self.writer_seen = self.touched = self.clock()

    @property
    def end(self) -> int:
        return self.base + len(self.data)

    def live(self) -> frozenset[str]:
        """The readers whose tasks may still read."""
        return (self.readers or frozenset()) - self.gone

    def ended(self) -> bool:
        """Every reader's task has ended: nothing more is read."""
        return self.readers is not None and not self.live()

    def lost(self) -> bool:
        """The writer has not called for :data:`WRITER_GONE_S` before its input's end."""
        return not self.eof and self.clock() - self.writer_seen > WRITER_GONE_S

    def acked(self) -> int:
        """How far every live reader has read (all of it with none)."""
        if self.readers is None:
            return self.base
        live = self.live()
        if not live:
            return self.end
        return min(min(max(self.offsets.get(r, self.base), self.base), self.end) for r in live)

    def _trim(self) -> None:
        """Drop what every live reader has read."""
        acked = self.acked()
        if acked > self.base:
            del self.data[: acked - self.base]
            self.base = acked

    def _pulse(self) -> None:
        self._changes.pulse()

    async def _until(self, ready: Callable[[], bool], wait_s: float) -> None:
        await self._changes.until(ready, wait_s, MAX_WAIT_S)

    def name_readers(self, readers: Iterable[str]) -> None:
        """The task ids that read the stream (the writer's, once: later namings are the
        same, after a controller restart)."""
        if self.readers is None:
            self.readers = frozenset(readers)
            self._trim()
            self._pulse()

    def drop(self, gone: Iterable[str]) -> None:
        """Readers whose tasks have ended: they hold nothing back any more."""
        fresh = set(gone) - self.gone
        if fresh:
            self.gone |= fresh
            self._trim()
            self._pulse()

    async def _check(self, gone: Gone | None) -> None:
        """Ask ``gone`` which live readers' tasks have ended, at most every
        :data:`CHECK_EVERY_S`."""
        now = self.clock()
        if gone is None or self.readers is None:
            return
        if self.checked is not None and now - self.checked < CHECK_EVERY_S:
            return
        self.checked = now
        self.drop(await gone(self.live()))

    async def write(
        self,
        at: int,
        data: bytes,
        eof: bool,
        kept: int | None,
        wait_s: float,
        gone: Gone | None = None,
    ) -> Written:
        """The writer's ``data`` from offset ``at`` on (``eof``: its input ends after it;
        ``kept``: it keeps its bytes from there on): adds what is new and fits, waiting up to
        ``wait_s`` for room while live readers have not read enough (``gone`` says which
        readers' tasks have ended). :class:`StreamGap` for a chunk past the end that the
        writer cannot send again."""
        self.touched = self.writer_seen = self.clock()
        if kept is not None and kept > at:
            raise StreamGap(f"kept offset {kept} is past the chunk's offset {at}")
        if not self.anchored:  # (a new stream, or one made anew after a restart)
            self.base, self.anchored = (kept if kept is not None else at), True
            self.data.clear()
        if at > self.end:
            if kept is not None and self.base <= kept <= self.end:
                return self._written()  # (the writer sends again from the end)
            raise StreamGap(f"offset {at} is past the end of the stream ({self.end})")
        fresh = data[self.end - at :]
        await self._check(gone)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + min(max(wait_s, 0.0), MAX_WAIT_S)
        while fresh and len(self.data) >= MAX_BUFFER and not self.ended():
            left = deadline - loop.time()
            if left <= 0:
                break
            room = lambda: len(self.data) < MAX_BUFFER or self.ended()  # noqa: E731
            await self._until(room, min(left, CHECK_EVERY_S))
            await self._check(gone)
        if self.ended():
            return self._written()
        took = fresh[: max(0, MAX_BUFFER - len(self.data))]
        self.data += took
        if eof and len(took) == len(fresh):
            self.eof = True
        self._pulse()
        return self._written()

    def _written(self) -> Written:
        return Written(self.end, self.acked(), self.ended(), self.readers is not None)

    async def read(self, reader: str, at: int, wait_s: float) -> Chunk:
        """What ``reader`` reads from offset ``at`` (what is before it is acknowledged),
        waiting up to ``wait_s`` for some, or for the end. :class:`StreamGap` for an offset
        before what the stream holds, or past the end of an input that has ended, and for a
        reader the writer did not name."""
        self.touched = self.clock()
        if self.readers is not None and reader not in self.readers:
            raise StreamGap(f"task {reader} does not read this standard input")
        if self.anchored and at < self.base:
            raise StreamGap(f"offset {at} is before what the stream holds ({self.base})")
        self.offsets[reader] = at
        self._trim()
        self._pulse()  # (room for the writer, maybe)

        def ready() -> bool:
            return (self.anchored and self.end > at) or self.eof or self.lost()

        left = wait_s
        if not self.eof:  # (woken when the writer is taken for gone)
            left = min(left, max(0.0, self.writer_seen + WRITER_GONE_S - self.clock()) + 0.01)
        await self._until(ready, left)
        if self.anchored and at < self.base:  # (dropped meanwhile: another reader's offset)
            raise StreamGap(f"offset {at} is before what the stream holds ({self.base})")
        ended = self.eof or self.lost()
        if at > self.end and ended:
            raise StreamGap(f"offset {at} is past the end of the stream ({self.end})")
        start = at - self.base
        chunk = bytes(self.data[start : start + MAX_CHUNK]) if self.anchored else b""
        offset = at + len(chunk)
        closed = ended and offset == self.end
        every = self.readers is not None and all(
            self.offsets.get(r) == self.end for r in self.live()
        )
        if self.eof and every:
            self.done_at = self.done_at or self.clock()  # (each reader has read the end)
        return Chunk(chunk, offset, closed, closed and not self.eof)


class StdinStreams:
    """The streams, by job and id; only the server's event loop touches them."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self.streams: dict[tuple[str, str], StdinStream] = {}

    def new(self, job_id: str) -> str:
        """A new stream of ``job_id``'s: its id. :class:`TooManyStreams` past the cap."""
        stream_id = secrets.token_hex(8)
        self.open(job_id, stream_id)
        return stream_id

    def open(self, job_id: str, stream_id: str) -> StdinStream:
        """``job_id``'s stream ``stream_id``, made anew if the controller does not hold it
        (one it made before a restart); the stale and finished ones are dropped first.
        :class:`TooManyStreams` past the cap."""
        self.prune()
        found = self.streams.get((job_id, stream_id))
        if found is not None:
            return found
        held = sum(1 for job, _ in self.streams if job == job_id)
        if held >= MAX_STREAMS_PER_JOB:
            raise TooManyStreams(
                f"job {job_id} forwards {held} standard inputs already (srun's): at most "
                f"{MAX_STREAMS_PER_JOB} at once"
            )
        found = self.streams[(job_id, stream_id)] = StdinStream(job_id, stream_id, self.clock)
        return found

    def prune(self) -> None:
        now = self.clock()
        for key, stream in list(self.streams.items()):
            done = stream.done_at is not None and now - stream.done_at > DONE_KEEP_S
            if done or now - stream.touched > STALE_S:
                del self.streams[key]


def running_job(ctl: Controller, job_id: str) -> bool:
    """Whether ``job_id`` runs (its tasks may read a stream)."""
    with ctl.lock:
        return job_id in ctl.jobs


def ended_tasks(ctl: Controller, task_ids: Iterable[str]) -> set[str]:
    """Which of ``task_ids`` are of no running task (exited, or unknown)."""
    with ctl.lock:
        return {
            task_id
            for task_id in task_ids
            if (entry := ctl.tasks.get(task_id)) is None or entry[1].state == "exited"
        }
