"""A small HTTP server on loopback that takes submissions as a controller does, or refuses them
as one older than some request fields does: 422 naming those fields, FastAPI's way (nothing
is submitted). Every job it takes gets the id 5. Other routes it does not know (404), as a
controller older than them: ``fusesched run``'s keepalive, say."""

from __future__ import annotations

import contextlib
import json
import threading
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

#: What the server refuses a body for: FastAPI's error items (none: it takes it).
Refusal = Callable[[Any], list[dict[str, Any]]]
#: How it answers a path that takes no submissions: (status, body), or None for a 404.
Route = Callable[[str], tuple[int, Any] | None]
#: The routes it takes submissions on.
SUBMISSIONS = frozenset({"/v1/jobs", "/v1/jobs/batch", "/v1/submissions"})


@contextlib.contextmanager
def serving(refusal: Refusal, route: Route | None = None) -> Iterator[tuple[str, list[Any]]]:
    """The server's URL and the submissions it received, while it serves; ``route`` answers
    the other paths (a controller that knows them: the alive route, say)."""
    received: list[Any] = []

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers["content-length"])))
            answer: Any = {"id": "5"}
            if self.path == "/v1/submissions":
                answer = {"ids": ["5"]}
            elif self.path == "/v1/jobs/batch":  # (an id per job, as the controller answers)
                answer = {"ids": ["5"] * len(body)}
            status = 201
            if self.path not in SUBMISSIONS:
                status, answer = (route and route(self.path)) or (404, {"detail": "Not Found"})
            elif refused := refusal(body):
                answer, status = {"detail": refused}, 422
            if self.path in SUBMISSIONS:
                received.append(body)
            data = json.dumps(answer).encode()
            self.send_response(status)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args: object) -> None:
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}", received
    finally:
        httpd.shutdown()
        httpd.server_close()
