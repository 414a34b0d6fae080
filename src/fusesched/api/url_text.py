"""A URL whose path or query holds a NUL character (``%00``) is a 422, before any route.

Request bodies refuse NUL in their models (:mod:`fusesched.model.text`); a path or query
parameter with one would reach the store's lookups, which PostgreSQL refuses (a 500).
"""

from __future__ import annotations

from urllib.parse import parse_qsl

from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Receive, Scope, Send

from fusesched.model.text import NUL


class NulInUrl:
    """ASGI middleware: a 422 naming the query parameter (or the path) that holds a NUL."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            where = nul_in_url(scope["path"], scope["query_string"])
            if where is not None:
                detail = f"a NUL character (\\u0000) is not allowed in {where}"
                await JSONResponse({"detail": detail}, 422)(scope, receive, send)
                return
        await self.app(scope, receive, send)


def nul_in_url(path: str, query: bytes) -> str | None:
    """``"the URL path"`` or ``"the query parameter 'user'"`` when that part of a request holds a
    NUL character (``path`` decoded, ``query`` as sent); None when none does."""
    if NUL in path:
        return "the URL path"
    if b"%00" not in query and b"\x00" not in query:
        return None
    for name, value in parse_qsl(query.decode("latin-1"), keep_blank_values=True):
        if NUL in name or NUL in value:
            return f"the query parameter {name!r}"
    return "the query"
