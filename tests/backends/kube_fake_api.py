"""A tiny in-memory Kubernetes API server for the back end's tests.

It speaks just enough of the REST API (collections and items under ``/api/v1`` and
``/apis/<group>/<version>``, label-selector lists, pod logs, Status errors) for the real
``kubernetes`` client to run its whole request layer against it: URLs, query strings, JSON
bodies, response deserialisation into the client's models and ApiException on errors.
"""

from __future__ import annotations

import json
import re
import threading
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

# /api/v1[/namespaces/<ns>]/<plural>[/<name>[/log]] or /apis/<group>/<version>/...
_PATH = re.compile(
    r"^/(?:api/v1|apis/[^/]+/[^/]+)(?:/namespaces/[^/]+)?/[^/]+"
    r"(?:/(?P<name>[^/]+)(?P<log>/log)?)?$"
)


@dataclass
class Request:
    method: str
    path: str
    query: dict[str, list[str]]
    body: Any


@dataclass
class FakeKubeApi:
    """Objects by collection path, then name; ``requests`` records what the client sent."""

    objects: dict[str, dict[str, dict[str, Any]]] = field(default_factory=dict)
    logs: dict[str, str] = field(default_factory=dict)  # pod name → log text
    requests: list[Request] = field(default_factory=list)
    failures: list[tuple[int, str]] = field(default_factory=list)  # next responses to fail
    port: int = 0
    _server: ThreadingHTTPServer | None = None

    @property
    def host(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def fail_next(self, status: int, message: str) -> None:
        self.failures.append((status, message))

    def put(self, collection: str, obj: dict[str, Any]) -> None:
        self.objects.setdefault(collection, {})[obj["metadata"]["name"]] = obj

    def get(self, collection: str, name: str) -> dict[str, Any]:
        return self.objects[collection][name]

    def names(self, collection: str) -> list[str]:
        return sorted(self.objects.get(collection, {}))

    # -- the HTTP side ---------------------------------------------------------------------

    def handle(self, method: str, raw_path: str, body: Any) -> tuple[int, Any]:
        url = urlsplit(raw_path)
        query = parse_qs(url.query)
        self.requests.append(Request(method, url.path, query, body))
        if self.failures:
            code, message = self.failures.pop(0)
            return code, _status(code, message)
        match = _PATH.match(url.path)
        if match is None:
            return 404, _status(404, f"no route {url.path}")
        name = match["name"]
        collection = url.path[: match.start("name") - 1] if name else url.path
        if match["log"]:
            return (200, self.logs.get(name, "")) if name in self.logs else (404, _status(404, ""))
        items = self.objects.setdefault(collection, {})
        if method == "POST":
            return self._create(items, body)
        if name is None:
            return 200, self._list(items, query.get("labelSelector", [""])[0])
        if name not in items:
            return 404, _status(404, f'"{name}" not found')
        if method == "DELETE":
            return 200, items.pop(name)
        return 200, items[name]

    @staticmethod
    def _create(items: dict[str, dict[str, Any]], body: dict[str, Any]) -> tuple[int, Any]:
        name = body["metadata"]["name"]
        if name in items:
            return 409, _status(409, f'"{name}" already exists')
        body["metadata"]["uid"] = str(uuid.uuid4())
        items[name] = body
        return 201, body

    @staticmethod
    def _list(items: dict[str, dict[str, Any]], selector: str) -> dict[str, Any]:
        wanted = dict(term.split("=", 1) for term in selector.split(",") if term)
        chosen = [
            obj
            for obj in items.values()
            if all(obj["metadata"].get("labels", {}).get(k) == v for k, v in wanted.items())
        ]
        return {"kind": "List", "apiVersion": "v1", "metadata": {}, "items": chosen}

    def start(self) -> None:
        api = self

        class Handler(BaseHTTPRequestHandler):
            def _serve(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length) if length else b""
                code, payload = api.handle(self.command, self.path, json.loads(raw or b"null"))
                data = (
                    payload.encode() if isinstance(payload, str) else json.dumps(payload).encode()
                )
                self.send_response(code)
                kind = "text/plain" if isinstance(payload, str) else "application/json"
                self.send_header("Content-Type", kind)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            do_GET = do_POST = do_DELETE = _serve

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self._server.server_address[1]
        threading.Thread(target=self._server.serve_forever, args=(0.05,), daemon=True).start()

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()


def _status(code: int, message: str) -> dict[str, Any]:
    return {
        "kind": "Status",
        "apiVersion": "v1",
        "status": "Failure",
        "message": message,
        "code": code,
    }


def running_fake() -> Iterator[FakeKubeApi]:
    """For a pytest fixture: a started fake, stopped afterwards."""
    api = FakeKubeApi()
    api.start()
    try:
        yield api
    finally:
        api.stop()
