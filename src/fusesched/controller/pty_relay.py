"""The controller's relay of ``fusesched run --pty`` (Slurm's ``srun --pty``): a session per
pseudo-terminal task (a ``run --pty`` job's one task, or a job step's: ``srun --pty`` in an
allocation, ``run --jobid``), kept in memory, through which the client's keystrokes reach the task's
terminal and the terminal's output reaches the client (agents listen on no port: both ends
call the controller, :mod:`fusesched.api.pty_routes`).

Each way is a :class:`Pipe`: a bounded byte stream with offsets. A writer says where its chunk
starts, so that a chunk sent again (its answer was lost) is not added twice; a reader says
where it wants to read from, which acknowledges (drops) everything before it, so that an
answer lost on the way is read again. A full pipe takes what fits: the writer waits (the
agent stops reading the terminal, the task blocks on its writes), as a terminal does.

Both ends long-poll: a read with nothing to give, or a write with no room, waits (on an
``asyncio.Event`` that every change of the session sets: the routes run on the server's event
loop, which alone touches sessions) up to the wait the caller asked for. A keystroke's round
trip is then a few requests, not a heartbeat interval.

The output ends when the agent posts its end (``eof``), after the last of it: the task's
exit can end its job before then (a command that ends at once), and the client goes on
reading until that end. A session whose task has exited waits for it no longer than
:data:`LAST_OUTPUT_S` after that exit, or after the agent's latest post (an agent that died
with its task posts nothing more): then its output is answered closed where it stands.

A session lives until its client has read the end of the output (plus :data:`DONE_KEEP_S`,
for an answer lost on the way) or until nobody has touched it for :data:`STALE_S`.

A controller that restarts (or a standby that takes over) has no sessions: the agent still
holds the terminal, and each end goes on calling with its offsets. A new session's stream
starts where its first caller says it is (:meth:`Pipe.read`, :meth:`Pipe.place`): a writer
keeps what its reader has not acknowledged yet (each answer says how far that is, ``acked``)
and says from where (``kept``), so that what the old session held and lost is sent again;
a reader ahead of what was sent again skips to its offset. The relay keeps no sessions on
disk: nothing in one outlives what its two ends keep.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from fusesched.controller.changes import Changes

#: The most bytes waiting to reach the task's terminal (typed or pasted).
MAX_INPUT_BUFFER = 64 * 1024
#: The most bytes of the terminal's output waiting for the client.
MAX_OUTPUT_BUFFER = 256 * 1024
#: The most bytes one request may carry, and one answer gives.
MAX_CHUNK = 64 * 1024
#: The longest a long poll waits (seconds).
MAX_WAIT_S = 25.0
#: A session whose output has all been read is dropped this long after (seconds).
DONE_KEEP_S = 30.0
#: A session nobody touched for this long is dropped (seconds).
STALE_S = 600.0
#: How long after its task's exit, or its agent's latest post since, a terminal's output is
#: waited for (seconds): its agent posts the last of it, and its end, at once unless it died
#: too or is far behind (a loaded node).
LAST_OUTPUT_S = 10.0


class Gap(ValueError):
    """An offset outside what a pipe holds (a read before what was acknowledged, or past
    the end; a write past the end): the caller's bug or another caller's session."""


@dataclass
class Pipe:
    """A byte stream: ``data`` holds its bytes from offset ``base`` on; ``closed``: its
    writer said it has ended (nothing more will be written). ``anchored``: a call has said
    where the stream is (a new session's first call sets ``base``: 0, or where the ends had
    come to under a controller that restarted since); ``resumable``: its writer says what it
    keeps (``kept``), and sends it again when asked."""

    limit: int
    base: int = 0
    data: bytearray = field(default_factory=bytearray)
    closed: bool = False
    anchored: bool = False
    resumable: bool = False

    @property
    def end(self) -> int:
        return self.base + len(self.data)

    def room(self) -> int:
        return max(0, self.limit - len(self.data))

    def _anchor(self, at: int) -> None:
        """The stream is at ``at``: what it held before is dropped (read, or never had)."""
        self.base, self.anchored = at, True
        self.data.clear()

    def place(self, at: int, kept: int | None) -> int:
        """Where a writer's chunk at ``at`` goes: ``at``, or the end when the writer is ahead
        of it and keeps the bytes from ``kept`` on (a session opened anew: it sends again from
        there; a new session starts at ``kept``). :class:`Gap` for an offset past the end
        that the writer cannot send again."""
        if kept is not None:
            if kept > at:
                raise Gap(f"kept offset {kept} is past the chunk's offset {at}")
            self.resumable = True
            if not self.anchored:
                self._anchor(kept)
        self.anchored = True
        if at > self.end and kept is not None and kept <= self.end:
            return self.end
        if at < 0 or at > self.end:
            raise Gap(f"offset {at} is past the end of the stream ({self.end})")
        return at

    def write(self, at: int, chunk: bytes) -> int:
        """Add the part of ``chunk`` (which starts at offset ``at``) that is new and fits;
        the new end. :class:`Gap` if ``at`` is past the end."""
        self.anchored = True
        if at < 0 or at > self.end:
            raise Gap(f"offset {at} is past the end of the stream ({self.end})")
        fresh = chunk[self.end - at :]
        self.data += fresh[: self.room()]
        return self.end

    def read(self, at: int, most: int = MAX_CHUNK) -> bytes:
        """Up to ``most`` bytes from offset ``at``; what is before ``at`` is dropped (read).
        A new stream starts at ``at``; a resumable one skips to it when ``at`` is past its
        end (its writer sends from there). :class:`Gap` if ``at`` is before what is kept
        or past the end."""
        if not self.anchored or (at > self.end and self.resumable):
            self._anchor(at)
        if at < self.base or at > self.end:
            raise Gap(f"offset {at} is outside the stream's kept bytes ({self.base}-{self.end})")
        del self.data[: at - self.base]
        self.base = at
        return bytes(self.data[:most])

    def drained(self) -> bool:
        """Closed, and everything in it read."""
        return self.closed and not self.data


@dataclass(frozen=True, slots=True)
class TaskRef:
    """A pseudo-terminal task, as the relay's routes find it (controller/pty_tasks.py)."""

    job_id: str
    task_id: str
    node: str
    step: bool = False  # a job step's (``srun --pty``), not the job's own (``run --pty``)
    user: str = ""  # the job's
    # it exited this long ago (seconds; None: it runs, or ended while no controller ran)
    ended_s: float | None = None


@dataclass(frozen=True, slots=True)
class Output:
    """What a read of a pipe gives: the bytes, the offset to read from next, and whether the
    stream has ended there."""

    data: bytes
    next_offset: int
    closed: bool


@dataclass(frozen=True, slots=True)
class Taken:
    """What a write gives back: the offset to write from next (the end of what the pipe
    holds, maybe before the writer's: send again from there) and how far the reader has
    acknowledged (the writer may forget what is before it)."""

    offset: int
    acked: int


@dataclass(frozen=True, slots=True)
class Input:
    """What the agent's read of the input gives: the bytes, the next offset, the window's
    newest size (with its number, ``size_seq``) when it changed since the agent's last one,
    and whether the session ended (its output closed: the task's terminal is gone)."""

    data: bytes
    next_offset: int
    size: tuple[int, int] | None
    size_seq: int
    ended: bool


class PtySession:
    """One pseudo-terminal task's relay: ``to_task`` (keystrokes) and ``from_task`` (the
    terminal's output), and the window's size as the client last gave it. ``step``: the
    task is a job step's (its client names the task), not the job's own (it names the job);
    ``user``: the job's (its sessions count against that user's cap, controller/pty_cap.py)."""

    def __init__(
        self,
        job_id: str,
        task_id: str,
        node: str,
        now: float,
        step: bool = False,
        user: str = "",
    ) -> None:
        self.job_id = job_id
        self.task_id = task_id
        self.node = node
        self.step = step
        self.user = user
        self.to_task = Pipe(MAX_INPUT_BUFFER)
        self.from_task = Pipe(MAX_OUTPUT_BUFFER)
        self.size: tuple[int, int] | None = None
        self.size_seq = 0
        self.touched = now
        self.done_at: float | None = None  # when the client read the end of the output
        # its task has exited: its output is not waited for past this instant (LAST_OUTPUT_S)
        self.output_by: float | None = None
        self._changes = Changes()

    def _pulse(self) -> None:
        self._changes.pulse()

    async def _until(self, ready: Callable[[], bool], wait_s: float) -> None:
        await self._changes.until(ready, wait_s, MAX_WAIT_S)

    # -- the client's end --------------------------------------------------------------

    async def type_in(
        self,
        at: int,
        data: bytes,
        size: tuple[int, int] | None,
        wait_s: float,
        now: float,
        kept: int | None = None,
    ) -> Taken:
        """The client's keystrokes from offset ``at`` (and its window's new size; ``kept``:
        it keeps its keystrokes from there on, not yet acknowledged): waits up to ``wait_s``
        for room when the input is full."""
        self.touched = now
        if size is not None and size != self.size:
            self.size, self.size_seq = size, self.size_seq + 1
            self._pulse()
        start = self.to_task.place(at, kept)
        if start != at:  # (a new session behind the client: it sends again from there)
            return Taken(start, self.to_task.base)
        if at + len(data) > self.to_task.end:
            await self._until(lambda: self.to_task.room() > 0 or self.from_task.closed, wait_s)
        if self.from_task.closed:  # (the terminal is gone: nothing more reaches it)
            return Taken(at + len(data), at + len(data))
        end = self.to_task.write(at, data)
        self._pulse()
        return Taken(end, self.to_task.base)

    async def read_output(self, at: int, wait_s: float, now: float) -> Output:
        """The terminal's output from offset ``at``, waiting up to ``wait_s`` for some; past
        :attr:`output_by` with nothing more, closed though its agent did not say so."""
        self.touched = now
        self.from_task.read(at, 0)  # (checks ``at``, drops what was read: room for more)
        self._pulse()
        left = wait_s if self.output_by is None else min(wait_s, self.output_by - now)
        await self._until(lambda: self.from_task.end > at or self.from_task.closed, left)
        data = self.from_task.read(at)
        given_up = self.output_by is not None and self.output_by - now <= wait_s  # (reached)
        ended = self.from_task.closed or (given_up and not data)
        closed = ended and at + len(data) == self.from_task.end
        if closed and self.done_at is None:
            self.done_at = now
        return Output(data, at + len(data), closed)

    # -- the agent's end ---------------------------------------------------------------

    async def read_input(self, at: int, size_seq: int, wait_s: float, now: float) -> Input:
        """The keystrokes from offset ``at`` and the window's size if other than the one
        numbered ``size_seq`` (newer; or the numbers of a session before a restart, which
        start again), waiting up to ``wait_s`` for either."""
        self.touched = now
        self.to_task.read(at, 0)
        self._pulse()

        def ready() -> bool:
            return self.to_task.end > at or self.size_seq != size_seq or self.from_task.closed

        await self._until(ready, wait_s)
        data = self.to_task.read(at)
        newer = self.size if self.size_seq != size_seq else None
        return Input(data, at + len(data), newer, self.size_seq, self.from_task.closed)

    async def put_output(
        self,
        at: int,
        data: bytes,
        eof: bool,
        wait_s: float,
        now: float,
        kept: int | None = None,
    ) -> Taken:
        """The terminal's output from offset ``at`` (``eof``: its end; ``kept``: the agent
        keeps the output from there on, not yet acknowledged), waiting up to ``wait_s`` for
        room when the client has not read enough (the stream is closed only once all of
        ``data`` was taken)."""
        self.touched = now
        self._heard(now)
        start = self.from_task.place(at, kept)
        if start != at:  # (a new session behind the agent: it sends again from there)
            return Taken(start, self.from_task.base)
        if at + len(data) > self.from_task.end:
            began = asyncio.get_running_loop().time()
            await self._until(lambda: self.from_task.room() > 0, wait_s)
            self._heard(now + asyncio.get_running_loop().time() - began)
        end = self.from_task.write(at, data)
        if eof and end == at + len(data):
            self.from_task.closed = True
        self._pulse()
        return Taken(end, self.from_task.base)

    def _heard(self, now: float) -> None:
        """The agent posted at ``now``: it is there, and its next post is waited for as long
        as its first was (the client may read everything before it comes)."""
        if self.output_by is not None:
            self.output_by = max(self.output_by, now + LAST_OUTPUT_S)


class PtyRelay:
    """The sessions, by task id. The routes touch them on the event loop; the submissions
    count a user's (:meth:`terminals_of`) from other threads, hence the lock. ``recovered``:
    the ``run --pty`` tasks a previous controller had started (controller/pty_tasks.py)."""

    def __init__(self, recovered: Iterable[str] = ()) -> None:
        self.sessions: dict[str, PtySession] = {}
        self.recovered = frozenset(recovered)
        self._lock = threading.Lock()

    def get(self, task_id: str) -> PtySession | None:
        return self.sessions.get(task_id)

    def of_job(self, job_id: str) -> PtySession | None:
        """The session of ``job_id``'s own task (``run --pty``), not of one of its steps."""
        with self._lock:
            found = [s for s in self.sessions.values() if s.job_id == job_id and not s.step]
        return found[0] if found else None

    def open(self, task: TaskRef, now: float) -> PtySession:
        """``task``'s session, new if it has none; the stale and finished ones are dropped
        first."""
        self.prune(now)
        with self._lock:
            found = self.sessions.get(task.task_id)
            if found is None:
                found = PtySession(task.job_id, task.task_id, task.node, now, task.step, task.user)
                self.sessions[task.task_id] = found
            if task.ended_s is not None and found.output_by is None:
                found.output_by = now + max(0.0, LAST_OUTPUT_S - task.ended_s)
        return found

    def prune(self, now: float) -> None:
        with self._lock:
            for task_id, session in list(self.sessions.items()):
                done = session.done_at is not None and now - session.done_at > DONE_KEEP_S
                if done or now - session.touched > STALE_S:
                    del self.sessions[task_id]

    def terminals_of(self, user: str, now: float) -> set[str]:
        """The terminals whose sessions ``user``'s jobs hold at ``now`` (the stale and
        finished ones dropped first; not one whose client has read its end: that terminal is
        closed, its session kept a while only for an answer lost on the way): a ``run --pty``
        job's by its id, a step's by its task's (:func:`terminal_key`)."""
        self.prune(now)
        with self._lock:
            held = [s for s in self.sessions.values() if s.user == user and s.done_at is None]
        return {terminal_key(s.job_id, s.task_id, s.step) for s in held}


def terminal_key(job_id: str, task_id: str, step: bool) -> str:
    """What names a terminal: a step's task id (``srun --pty``), else its job's id (``run
    --pty``: one terminal, whichever run of it)."""
    return task_id if step else job_id
