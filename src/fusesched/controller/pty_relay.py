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

A session lives until its client has read the end of the output (plus :data:`DONE_KEEP_S`,
for an answer lost on the way) or until nobody has touched it for :data:`STALE_S`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, field

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


class Gap(ValueError):
    """An offset outside what a pipe holds (a read before what was acknowledged, or past
    the end; a write past the end): the caller's bug or another caller's session."""


@dataclass
class Pipe:
    """A byte stream: ``data`` holds its bytes from offset ``base`` on; ``closed``: its
    writer said it has ended (nothing more will be written)."""

    limit: int
    base: int = 0
    data: bytearray = field(default_factory=bytearray)
    closed: bool = False

    @property
    def end(self) -> int:
        return self.base + len(self.data)

    def room(self) -> int:
        return max(0, self.limit - len(self.data))

    def write(self, at: int, chunk: bytes) -> int:
        """Add the part of ``chunk`` (which starts at offset ``at``) that is new and fits;
        the new end. :class:`Gap` if ``at`` is past the end."""
        if at < 0 or at > self.end:
            raise Gap(f"offset {at} is past the end of the stream ({self.end})")
        fresh = chunk[self.end - at :]
        self.data += fresh[: self.room()]
        return self.end

    def read(self, at: int, most: int = MAX_CHUNK) -> bytes:
        """Up to ``most`` bytes from offset ``at``; what is before ``at`` is dropped (read).
        :class:`Gap` if ``at`` is before what is kept or past the end."""
        if at < self.base or at > self.end:
            raise Gap(f"offset {at} is outside the stream's kept bytes ({self.base}-{self.end})")
        del self.data[: at - self.base]
        self.base = at
        return bytes(self.data[:most])

    def drained(self) -> bool:
        """Closed, and everything in it read."""
        return self.closed and not self.data


@dataclass(frozen=True, slots=True)
class Output:
    """What a read of a pipe gives: the bytes, the offset to read from next, and whether the
    stream has ended there."""

    data: bytes
    next_offset: int
    closed: bool


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
    task is a job step's (its client names the task), not the job's own (it names the job)."""

    def __init__(
        self, job_id: str, task_id: str, node: str, now: float, step: bool = False
    ) -> None:
        self.job_id = job_id
        self.task_id = task_id
        self.node = node
        self.step = step
        self.to_task = Pipe(MAX_INPUT_BUFFER)
        self.from_task = Pipe(MAX_OUTPUT_BUFFER)
        self.size: tuple[int, int] | None = None
        self.size_seq = 0
        self.touched = now
        self.done_at: float | None = None  # when the client read the end of the output
        self._changed = asyncio.Event()

    def _pulse(self) -> None:
        """Wake every waiter: something changed."""
        self._changed.set()
        self._changed = asyncio.Event()

    async def _until(self, ready: Callable[[], bool], wait_s: float) -> None:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + min(max(wait_s, 0.0), MAX_WAIT_S)
        while not ready():
            left = deadline - loop.time()
            if left <= 0:
                return
            try:
                await asyncio.wait_for(self._changed.wait(), left)
            except TimeoutError:
                return

    # -- the client's end --------------------------------------------------------------

    async def type_in(
        self, at: int, data: bytes, size: tuple[int, int] | None, wait_s: float, now: float
    ) -> int:
        """The client's keystrokes from offset ``at`` (and its window's new size): waits up
        to ``wait_s`` for room when the input is full; the end of what was taken."""
        self.touched = now
        if size is not None and size != self.size:
            self.size, self.size_seq = size, self.size_seq + 1
            self._pulse()
        if at < 0 or at > self.to_task.end:
            raise Gap(f"offset {at} is past the end of the stream ({self.to_task.end})")
        if at + len(data) > self.to_task.end:
            await self._until(lambda: self.to_task.room() > 0 or self.from_task.closed, wait_s)
        if self.from_task.closed:  # (the terminal is gone: nothing more reaches it)
            return at + len(data)
        end = self.to_task.write(at, data)
        self._pulse()
        return end

    async def read_output(self, at: int, wait_s: float, now: float) -> Output:
        """The terminal's output from offset ``at``, waiting up to ``wait_s`` for some."""
        self.touched = now
        self.from_task.read(at, 0)  # (checks ``at``, drops what was read: room for more)
        self._pulse()
        await self._until(lambda: self.from_task.end > at or self.from_task.closed, wait_s)
        data = self.from_task.read(at)
        closed = self.from_task.closed and at + len(data) == self.from_task.end
        if closed and self.done_at is None:
            self.done_at = now
        return Output(data, at + len(data), closed)

    # -- the agent's end ---------------------------------------------------------------

    async def read_input(self, at: int, size_seq: int, wait_s: float, now: float) -> Input:
        """The keystrokes from offset ``at`` and the window's size if newer than
        ``size_seq``, waiting up to ``wait_s`` for either."""
        self.touched = now
        self.to_task.read(at, 0)
        self._pulse()

        def ready() -> bool:
            return self.to_task.end > at or self.size_seq > size_seq or self.from_task.closed

        await self._until(ready, wait_s)
        data = self.to_task.read(at)
        newer = self.size if self.size_seq > size_seq else None
        return Input(data, at + len(data), newer, self.size_seq, self.from_task.closed)

    async def put_output(self, at: int, data: bytes, eof: bool, wait_s: float, now: float) -> int:
        """The terminal's output from offset ``at`` (``eof``: its end), waiting up to
        ``wait_s`` for room when the client has not read enough; the end of what was taken
        (the stream is closed only once all of ``data`` was)."""
        self.touched = now
        if at + len(data) > self.from_task.end:
            await self._until(lambda: self.from_task.room() > 0, wait_s)
        end = self.from_task.write(at, data)
        if eof and end == at + len(data):
            self.from_task.closed = True
        self._pulse()
        return end


class PtyRelay:
    """The sessions, by task id."""

    def __init__(self) -> None:
        self.sessions: dict[str, PtySession] = {}

    def get(self, task_id: str) -> PtySession | None:
        return self.sessions.get(task_id)

    def of_job(self, job_id: str) -> PtySession | None:
        """The session of ``job_id``'s own task (``run --pty``), not of one of its steps."""
        return next((s for s in self.sessions.values() if s.job_id == job_id and not s.step), None)

    def open(
        self, job_id: str, task_id: str, node: str, now: float, step: bool = False
    ) -> PtySession:
        """``task_id``'s session, new if it has none; the stale and finished ones are
        dropped first."""
        self.prune(now)
        found = self.sessions.get(task_id)
        if found is None:
            found = self.sessions[task_id] = PtySession(job_id, task_id, node, now, step)
        return found

    def prune(self, now: float) -> None:
        for task_id, session in list(self.sessions.items()):
            done = session.done_at is not None and now - session.done_at > DONE_KEEP_S
            if done or now - session.touched > STALE_S:
                del self.sessions[task_id]
