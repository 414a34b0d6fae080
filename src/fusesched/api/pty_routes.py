"""The relay of ``fusesched run --pty`` (:mod:`fusesched.controller.pty_relay`): the client's
two routes (its keystrokes in, the terminal's output out) and the agent's two (the same,
the other way round). Bytes travel base64-encoded in JSON. Every route is a coroutine: a long
poll waits on the event loop, not in a thread of the pool (a thread per waiting terminal
would starve the other routes); the controller's state is read in the pool, briefly.

The client's routes are the job's own user's or an admin's (as cancel); a step's (``srun
--pty``, by task: ``/v1/tasks/{id}/pty/...``) also the job's own credential's, as the step
routes; the agent's are its node's own credential's, for a live task of that node launched
with ``pty``.

A writer (the client's keystrokes, the agent's output) says with ``?kept=`` from which offset
it keeps what it sent (a query parameter: an older controller, which refuses a body field it
does not know, ignores it), and each answer says how far the reader has read (``acked``):
after a controller restart the new session asks for what the old one held again
(:mod:`fusesched.controller.pty_relay`).
"""

from __future__ import annotations

import base64
import binascii
import time
from collections.abc import Awaitable, Callable
from typing import Annotated

from fastapi import FastAPI, HTTPException, Query
from pydantic import BaseModel, ConfigDict, Field
from starlette.concurrency import run_in_threadpool

from fusesched.api.access import Access, Caller
from fusesched.api.responses import forbidden
from fusesched.controller import pty_tasks
from fusesched.controller.auth import Principal
from fusesched.controller.logs import job_of
from fusesched.controller.pty_relay import MAX_CHUNK, MAX_WAIT_S, Gap, PtySession, TaskRef
from fusesched.controller.records import UnknownJobError
from fusesched.submit.terminal import MAX_SIDE

#: The longest base64 text of one chunk.
MAX_TEXT = (MAX_CHUNK + 2) // 3 * 4

Offset = Annotated[int, Field(ge=0)]
Wait = Annotated[float, Field(ge=0, le=MAX_WAIT_S)]
Side = Annotated[int, Field(ge=1, le=MAX_SIDE)]


class _Body(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class PtyInput(_Body):
    """Keystrokes from ``offset`` on (base64), and the window's size when it changed."""

    offset: Offset
    data: str = ""
    rows: Side | None = None
    cols: Side | None = None
    wait: Wait = 10.0


class PtyOutput(_Body):
    """The terminal's output from ``offset`` on (base64); ``eof``: it has ended there."""

    offset: Offset
    data: str = ""
    eof: bool = False
    wait: Wait = 10.0


class Taken(_Body):
    offset: int  # the end of what the relay holds: send from here next (maybe again)
    acked: int  # the reader has read up to here: what is before it need not be kept


class OutputPage(_Body):
    data: str  # base64
    offset: int  # read from here next
    closed: bool  # the terminal's output ends at ``offset``


class InputPage(_Body):
    data: str  # base64
    offset: int
    rows: int | None = None  # the window's new size, when it changed
    cols: int | None = None
    size_seq: int  # say it back: a size is given once
    ended: bool  # the terminal's output has ended: nothing more to relay


def _bytes(text: str) -> bytes:
    if len(text) > MAX_TEXT:
        raise HTTPException(413, f"at most {MAX_CHUNK} bytes a request")
    try:
        return base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        raise HTTPException(422, "data: not base64") from None


def _text(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


Kept = Annotated[int | None, Query(ge=0)]


async def _typed(
    body: PtyInput, kept: int | None, session: Callable[[], Awaitable[PtySession]]
) -> Taken:
    """Give ``body``'s keystrokes and size to the session ``session`` finds."""
    data = _bytes(body.data)
    if (body.rows is None) != (body.cols is None):
        raise HTTPException(422, "rows and cols: give both or neither")
    size = None if body.rows is None or body.cols is None else (body.rows, body.cols)
    found = await session()
    try:
        took = await found.type_in(body.offset, data, size, body.wait, time.monotonic(), kept)
    except Gap as exc:
        raise HTTPException(409, str(exc)) from None
    return Taken(offset=took.offset, acked=took.acked)


async def _page(session: PtySession, offset: int, wait: float) -> OutputPage:
    """``session``'s terminal output from ``offset`` on, waiting up to ``wait`` for some."""
    try:
        page = await session.read_output(offset, wait, time.monotonic())
    except Gap as exc:
        raise HTTPException(409, str(exc)) from None
    return OutputPage(data=_text(page.data), offset=page.next_offset, closed=page.closed)


def add_pty_routes(app: FastAPI, access: Access) -> None:
    """Serve the relay's routes from ``app``."""
    controller = access.controller
    relay = controller.pty_relay

    async def found(lookup: Callable[..., TaskRef], *args: str) -> PtySession:
        """The session of the task ``lookup`` finds (opened if it has none)."""
        try:
            task = await run_in_threadpool(lookup, controller, *args)
        except UnknownJobError:
            raise HTTPException(404, f"no job {args[0]!r}") from None
        except pty_tasks.PtyRefused as exc:
            raise HTTPException(exc.status, str(exc)) from None
        return relay.open(task, time.monotonic())

    async def client_session(job_id: str, p: Principal) -> PtySession:
        await run_in_threadpool(access.may_act, p, job_id, "attach to")
        session = relay.of_job(job_id)
        return session if session is not None else await found(pty_tasks.client_task, job_id)

    async def step_session(task_id: str, p: Principal) -> PtySession:
        job_id = job_of(task_id)
        if not await run_in_threadpool(access.runs_steps, p, job_id):
            raise forbidden(f"only job {job_id}'s own credential or its owner may attach to it")
        session = relay.get(task_id)
        if session is not None and session.step:
            return session
        return await found(pty_tasks.step_task, task_id)

    async def agent_session(node: str, task_id: str, p: Principal) -> PtySession:
        access.the_node(p, node)
        session = relay.get(task_id)
        if session is not None and session.node == node:
            return session
        return await found(pty_tasks.agent_task, task_id, node)

    @app.post("/v1/jobs/{job_id}/pty/input", response_model=Taken, tags=["jobs"])
    async def pty_input(job_id: str, body: PtyInput, p: Caller, kept: Kept = None) -> Taken:
        """Keystrokes for the job's terminal (``fusesched run --pty``), from ``offset`` on
        (a chunk sent again is taken once), and the window's new size (``rows`` and
        ``cols``, together); ``?kept=``: the client keeps what it sent from there on (sent
        again when a restarted controller asks). Waits up to ``wait`` seconds for room when
        the task has not read what came before; answers the offset to send from next and
        how far the task has read (``acked``). The job's own user or an admin; 404 for an
        unknown job, 409 for one without a terminal, not started or ended, 413 for more than
        64 KiB, 503 while a restarted controller waits for its node to report it."""
        return await _typed(body, kept, lambda: client_session(job_id, p))

    @app.get("/v1/jobs/{job_id}/pty/output", response_model=OutputPage, tags=["jobs"])
    async def pty_output(
        job_id: str,
        p: Caller,
        offset: Annotated[int, Query(ge=0)] = 0,
        wait: Annotated[float, Query(ge=0, le=MAX_WAIT_S)] = 10.0,
    ) -> OutputPage:
        """The terminal's output from ``offset`` on (what is before it counts as read),
        waiting up to ``wait`` seconds for some; ``closed``: it ends there (the job's exit
        code is then the job's): its agent posted the end, or nothing more came
        ``LAST_OUTPUT_S`` after the task's exit. A job that has ended is answered still when
        its task ran (its agent may post the last output after that end). As
        :func:`pty_input` for who and refusals."""
        return await _page(await client_session(job_id, p), offset, wait)

    @app.post("/v1/tasks/{task_id}/pty/input", response_model=Taken, tags=["jobs"])
    async def step_pty_input(task_id: str, body: PtyInput, p: Caller, kept: Kept = None) -> Taken:
        """Keystrokes for a job step's terminal (``srun --pty`` in an allocation, ``fusesched
        run --jobid ID --pty``), as :func:`pty_input`. The job's own credential (``srun`` in
        it), its owner or a cluster-admin (403 for others); 404 for a task not live, 409 for
        one of the job's own or without a terminal."""
        return await _typed(body, kept, lambda: step_session(task_id, p))

    @app.get("/v1/tasks/{task_id}/pty/output", response_model=OutputPage, tags=["jobs"])
    async def step_pty_output(
        task_id: str,
        p: Caller,
        offset: Annotated[int, Query(ge=0)] = 0,
        wait: Annotated[float, Query(ge=0, le=MAX_WAIT_S)] = 10.0,
    ) -> OutputPage:
        """A job step's terminal output, as :func:`pty_output` (its exit code is then its
        task's: ``GET /v1/tasks/{id}``). As :func:`step_pty_input` for who and refusals."""
        return await _page(await step_session(task_id, p), offset, wait)

    @app.get("/v1/agents/{node}/pty/{task_id}/input", response_model=InputPage, tags=["agents"])
    async def pty_task_input(
        node: str,
        task_id: str,
        p: Caller,
        offset: Annotated[int, Query(ge=0)] = 0,
        size_seq: Annotated[int, Query(ge=0)] = 0,
        wait: Annotated[float, Query(ge=0, le=MAX_WAIT_S)] = 10.0,
    ) -> InputPage:
        """The keystrokes for a task's terminal from ``offset`` on, and the window's size
        if it changed after ``size_seq``, waiting up to ``wait`` seconds for either. The
        node's own credential; 404 for a task not live on it, 409 for one without a
        terminal, 503 while a restarted controller waits for the node to report it."""
        session = await agent_session(node, task_id, p)
        try:
            got = await session.read_input(offset, size_seq, wait, time.monotonic())
        except Gap as exc:
            raise HTTPException(409, str(exc)) from None
        rows, cols = got.size if got.size is not None else (None, None)
        return InputPage(
            data=_text(got.data),
            offset=got.next_offset,
            rows=rows,
            cols=cols,
            size_seq=got.size_seq,
            ended=got.ended,
        )

    @app.post("/v1/agents/{node}/pty/{task_id}/output", response_model=Taken, tags=["agents"])
    async def pty_task_output(
        node: str, task_id: str, body: PtyOutput, p: Caller, kept: Kept = None
    ) -> Taken:
        """A task's terminal output from ``offset`` on (``eof``: it ends after it; ``?kept=``:
        the agent keeps its output from there on), waiting up to ``wait`` seconds for room
        while the client has not read enough; answers the offset to send from next and how
        far the client has read (``acked``). As :func:`pty_task_input` for who and
        refusals."""
        data = _bytes(body.data)
        session = await agent_session(node, task_id, p)
        now = time.monotonic()
        try:
            took = await session.put_output(body.offset, data, body.eof, body.wait, now, kept)
        except Gap as exc:
            raise HTTPException(409, str(exc)) from None
        return Taken(offset=took.offset, acked=took.acked)
