"""The API's hot path: ``POST /v1/submissions`` without FastAPI's routing (what ``fusesched
submit`` and ``sbatch`` send, one request per command).

FastAPI spends about as much CPU routing a request, solving its dependencies and wrapping
its answer as the submission's own parsing and storing. :class:`SubmissionsHotPath` sits in
the middleware stack (inside Starlette's server-error handler, so an unexpected exception is
the same 500 as anywhere) and answers the common case itself: authentication off, a JSON
body that is valid :class:`SubmissionFiles`, and jobs the controller accepts. It calls the
route's own :func:`~fusesched.api.job_routes.accept_files` in the thread pool, as the route
would, and answers 201 with the same body.

Anything else goes to the app unchanged: other routes, authentication on, another content
type, an invalid body. A refusal (:class:`HTTPException`, :class:`SubmitError`,
:class:`NotReadyError`, all raised before anything is stored) sends the request, with the
body already read, through the app again, which refuses it in its usual words and status. A
refused submission costs its parsing twice; an accepted one half the API's work.
"""

from __future__ import annotations

from typing import Final

from fastapi import HTTPException
from pydantic import ValidationError
from starlette.concurrency import run_in_threadpool
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from fusesched.api.access import Access
from fusesched.api.job_routes import accept_files
from fusesched.api.schemas import SubmissionFiles, SubmittedFiles
from fusesched.controller.records import NotReadyError
from fusesched.submit.errors import SubmitError

PATH: Final = "/v1/submissions"
_JSON: Final = b"application/json"


class SubmissionsHotPath:
    """ASGI middleware: accepted submissions answered here, everything else by ``app``."""

    def __init__(self, app: ASGIApp, access: Access) -> None:
        self.app = app
        self.access = access

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if (
            scope["type"] != "http"
            or scope["method"] != "POST"
            or scope["path"] != PATH
            or self.access.auth.enabled
            or not _json_body(scope)
        ):
            await self.app(scope, receive, send)
            return
        body = await _read_body(receive)
        if body is None:  # the client went away before sending it all: nothing to answer
            return
        answer = await self._accept(body)
        if answer is not None:
            await _send_json(send, 201, answer.model_dump_json().encode())
            return
        await self.app(scope, _replay(body, receive), send)

    async def _accept(self, body: bytes) -> SubmittedFiles | None:
        """The submission's answer, or None when the app should answer (a refusal)."""
        try:
            files = SubmissionFiles.model_validate_json(body)
        except ValidationError:
            return None
        principal = self.access.auth.authenticate(None)  # authentication is off: anonymous
        try:
            return await run_in_threadpool(accept_files, self.access, files, principal)
        except (HTTPException, SubmitError, NotReadyError):
            return None


def _json_body(scope: Scope) -> bool:
    for name, value in scope["headers"]:
        if name == b"content-type":
            return bool(value.split(b";", 1)[0].strip().lower() == _JSON)
    return False


async def _read_body(receive: Receive) -> bytes | None:
    """The whole request body; None if the client went away before sending all of it."""
    chunks: list[bytes] = []
    while True:
        message = await receive()
        if message["type"] != "http.request":
            return None
        chunks.append(message.get("body", b""))
        if not message.get("more_body", False):
            return b"".join(chunks)


def _replay(body: bytes, receive: Receive) -> Receive:
    """A ``receive`` that hands the app the body already read, then the client's own."""
    sent = False

    async def replay() -> Message:
        nonlocal sent
        if sent:
            return await receive()
        sent = True
        return {"type": "http.request", "body": body, "more_body": False}

    return replay


async def _send_json(send: Send, status: int, body: bytes) -> None:
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", _JSON),
                (b"content-length", str(len(body)).encode()),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body, "more_body": False})
