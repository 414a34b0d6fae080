"""The relay of ``srun``'s standard input to its step's tasks as it comes
(:mod:`fusesched.controller.stdin_streams`): ``srun`` opens a stream and writes its input
into it (agent/stdin_forward.py); each task that gets it reads it through its reader
(:mod:`fusesched.stdin_pump`). Bytes travel base64-encoded in JSON. Every route is a
coroutine: a long poll waits on the event loop, not in a thread of the pool; what the
controller knows (the job runs, a reader's task has ended) is asked in the pool, briefly.

All three are the job's own credential's (``srun`` and its tasks hold it), its owner's or a
cluster-admin's, as the step routes. A controller older than them answers 404: ``srun`` then
reads its input to its end before the step starts, as it did before.

The writer says with ``?kept=`` from which offset it keeps what it sent (a query parameter,
as the ``--pty`` relay's), and each answer says how far every reader has read (``acked``):
after a controller restart the stream, made anew, asks for what the old one held again.
"""

from __future__ import annotations

import base64
import binascii
from typing import Annotated

from fastapi import FastAPI, HTTPException, Path, Query
from pydantic import BaseModel, ConfigDict, Field
from starlette.concurrency import run_in_threadpool

from fusesched.api.access import Access, Caller
from fusesched.api.responses import forbidden
from fusesched.controller.auth import Principal
from fusesched.controller.logs import job_of
from fusesched.controller.stdin_streams import (
    MAX_CHUNK,
    MAX_WAIT_S,
    STREAM_ID,
    StdinStream,
    StdinStreams,
    StreamGap,
    TooManyStreams,
    ended_tasks,
    running_job,
)

#: The longest base64 text of one chunk.
MAX_TEXT = (MAX_CHUNK + 2) // 3 * 4
#: The most readers a stream may have (a step's tasks).
MAX_READERS = 100_000

Offset = Annotated[int, Field(ge=0)]
Wait = Annotated[float, Field(ge=0, le=MAX_WAIT_S)]
StreamId = Annotated[str, Path(pattern=STREAM_ID.pattern, max_length=64)]


class _Body(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class StreamOpened(_Body):
    stream: str


class StdinChunk(_Body):
    """The writer's input from ``offset`` on (base64; ``eof``: it ends after it), and the
    task ids that read it (``readers``: with the first chunk, and whenever an answer says
    the stream does not know them)."""

    offset: Offset
    data: str = Field(default="", max_length=MAX_TEXT)
    eof: bool = False
    readers: list[Annotated[str, Field(min_length=1, max_length=200)]] | None = Field(
        default=None, max_length=MAX_READERS
    )
    wait: Wait = 10.0


class StdinTaken(_Body):
    offset: int  # the end of what the stream holds: send from here next (maybe again)
    acked: int  # every reader has read up to here: what is before it need not be kept
    ended: bool  # every reader's task has ended: nothing more is read
    readers: bool  # the stream knows its readers (else: name them in the next chunk)


class StdinPage(_Body):
    data: str  # base64
    offset: int  # read from here next
    eof: bool  # the input ends there
    lost: bool = False  # ... cut short: its writer (srun) is gone


def _bytes(text: str) -> bytes:
    try:
        return base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        raise HTTPException(422, "data: not base64") from None


def add_stdin_routes(app: FastAPI, access: Access) -> None:
    """Serve ``/v1/jobs/{job_id}/stdin...`` from ``app`` (the streams are this app's)."""
    controller = access.controller
    streams = StdinStreams()

    async def gone(task_ids: frozenset[str]) -> set[str]:
        return await run_in_threadpool(ended_tasks, controller, task_ids)

    async def allowed(job_id: str, p: Principal) -> None:
        if not await run_in_threadpool(access.runs_steps, p, job_id):
            raise forbidden(f"only job {job_id}'s own credential or its owner may forward input")

    async def stream_of(job_id: str, stream_id: str) -> StdinStream:
        """The job's stream (made anew if the controller does not hold it: after a
        restart); 404 for a job that does not run, 429 past its cap."""
        if not await run_in_threadpool(running_job, controller, job_id):
            raise HTTPException(404, f"job {job_id!r} is not running")
        try:
            return streams.open(job_id, stream_id)
        except TooManyStreams as exc:
            raise HTTPException(429, str(exc)) from None

    @app.post(
        "/v1/jobs/{job_id}/stdin", status_code=201, response_model=StreamOpened, tags=["agents"]
    )
    async def open_stdin(job_id: str, p: Caller) -> StreamOpened:
        """A new stream for ``srun``'s standard input, which its step's tasks read as it
        comes. 404 for a job that does not run, 429 past a job's cap on streams."""
        await allowed(job_id, p)
        if not await run_in_threadpool(running_job, controller, job_id):
            raise HTTPException(404, f"job {job_id!r} is not running")
        try:
            return StreamOpened(stream=streams.new(job_id))
        except TooManyStreams as exc:
            raise HTTPException(429, str(exc)) from None

    @app.post("/v1/jobs/{job_id}/stdin/{stream}", response_model=StdinTaken, tags=["agents"])
    async def write_stdin(
        job_id: str,
        stream: StreamId,
        body: StdinChunk,
        p: Caller,
        kept: Annotated[int | None, Query(ge=0)] = None,
    ) -> StdinTaken:
        """``srun``'s input from ``offset`` on (a chunk sent again is taken once; ``?kept=``:
        it keeps its input from there on, sent again when a restarted controller asks),
        waiting up to ``wait`` seconds for room while the tasks have not read enough;
        answers the offset to send from next, how far every task has read (``acked``) and
        whether they have all ended. 404 for a job that does not run, 409 for an offset the
        stream cannot take."""
        await allowed(job_id, p)
        data = _bytes(body.data)
        if body.readers is not None and any(job_of(r) != job_id for r in body.readers):
            raise HTTPException(422, f"readers: tasks of job {job_id} only")
        found = await stream_of(job_id, stream)
        if body.readers is not None:
            found.name_readers(body.readers)
        try:
            took = await found.write(body.offset, data, body.eof, kept, body.wait, gone)
        except StreamGap as exc:
            raise HTTPException(409, str(exc)) from None
        return StdinTaken(
            offset=took.offset, acked=took.acked, ended=took.ended, readers=took.readers
        )

    @app.get("/v1/jobs/{job_id}/stdin/{stream}", response_model=StdinPage, tags=["agents"])
    async def read_stdin(
        job_id: str,
        stream: StreamId,
        p: Caller,
        reader: Annotated[str, Query(min_length=1, max_length=200)],
        offset: Annotated[int, Query(ge=0)] = 0,
        wait: Annotated[float, Query(ge=0, le=MAX_WAIT_S)] = 10.0,
    ) -> StdinPage:
        """The input from ``offset`` on for the task ``reader`` (what is before it counts
        as read), waiting up to ``wait`` seconds for some; ``eof``: it ends there (``lost``:
        cut short, its ``srun`` gone). 404 for a job that does not run, 409 for an offset the
        stream no longer holds, or a task that does not read it."""
        await allowed(job_id, p)
        if job_of(reader) != job_id:
            raise forbidden(f"task {reader!r} is not of job {job_id}")
        found = await stream_of(job_id, stream)
        try:
            page = await found.read(reader, offset, wait)
        except StreamGap as exc:
            raise HTTPException(409, str(exc)) from None
        text = base64.b64encode(page.data).decode("ascii")
        return StdinPage(data=text, offset=page.offset, eof=page.eof, lost=page.lost)
