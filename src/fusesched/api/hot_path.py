"""The API's hot path: ``POST /v1/submissions`` without FastAPI's routing (what ``fusesched
submit`` and ``sbatch`` send, one request per command).

FastAPI spends about as much CPU routing a request, solving its dependencies and wrapping
its answer as the submission's own parsing and storing. :class:`SubmissionsHotPath` sits in
the middleware stack (inside Starlette's server-error handler, so an unexpected exception is
the same 500 as anywhere) and answers the common case itself: authentication off and a JSON
body that is valid :class:`SubmissionFiles`. It calls the route's own
:func:`~fusesched.api.job_routes.accept_files` in the thread pool, as the route would, and
answers as the route and the app's error handlers do: 201 with the same body, or the
refusal's status and ``{"detail": ...}`` (:func:`~fusesched.api.responses.refusal`, which the
app's handlers use too).

Everything else goes to the app unchanged: other routes, authentication on, another content
type, and a body that is not valid :class:`SubmissionFiles` (handed over with the body
already read; nothing has been done with it, and FastAPI answers its usual 422).
"""

from __future__ import annotations

from typing import Final

from pydantic import ValidationError
from starlette.concurrency import run_in_threadpool
from starlette.responses import Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from fusesched.api.access import Access
from fusesched.api.job_routes import accept_files
from fusesched.api.responses import REFUSALS, json_response, refusal
from fusesched.api.schemas import SubmissionFiles

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
        try:
            files = SubmissionFiles.model_validate_json(body)
        except ValidationError:  # FastAPI's own 422, from the app
            await self.app(scope, _replay(body, receive), send)
            return
        response = await self._answer(files)
        await response(scope, receive, send)

    async def _answer(self, files: SubmissionFiles) -> Response:
        """The route's answer to ``files``, refusals answered as the app's handlers do."""
        principal = self.access.auth.authenticate(None)  # authentication is off: anonymous
        try:
            accepted = await run_in_threadpool(accept_files, self.access, files, principal)
        except REFUSALS as exc:
            return refusal(exc)
        return json_response(accepted, 201)


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
