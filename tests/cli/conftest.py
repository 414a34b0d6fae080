"""What the client-command tests share: a real HTTP server that records what it receives and
answers as told, and an environment with no ambient token or controller."""

from __future__ import annotations

import contextlib
import json
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

#: The full ``fusesched`` command (the command framework; no quick path, no native front),
#: with the arguments that follow it.
FULL_COMMAND = [sys.executable, "-c", "from fusesched.cli.main import main; main()"]


@dataclass
class Script:
    """What the server answers next, and what it has received."""

    status: int = 200
    body: bytes = b'{"ids": ["7"], "warnings": []}'
    chunked: bool = False
    received: list[dict[str, Any]] = field(default_factory=list)


@pytest.fixture
def server() -> Iterator[tuple[str, Script]]:
    script = Script()

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_POST(self) -> None:
            length = int(self.headers["content-length"])
            self._answer(json.loads(self.rfile.read(length)))

        def do_GET(self) -> None:
            self._answer(None)

        def _answer(self, body: Any) -> None:
            script.received.append(
                {
                    "path": self.path,
                    "headers": {k.lower(): v for k, v in self.headers.items()},
                    "body": body,
                }
            )
            self.send_response(script.status)
            self.send_header("content-type", "application/json")
            if script.chunked:
                self.send_header("transfer-encoding", "chunked")
                self.end_headers()
                half = len(script.body) // 2
                for piece in (script.body[:half], script.body[half:], b""):
                    self.wfile.write(b"%x\r\n%s\r\n" % (len(piece), piece))
            else:
                self.send_header("content-length", str(len(script.body)))
                self.end_headers()
                self.wfile.write(script.body)

        def log_message(self, *args: object) -> None:
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}", script
    finally:
        httpd.shutdown()
        httpd.server_close()


@pytest.fixture(autouse=True)
def no_ambient_token(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    for name in ("FUSESCHED_TOKEN", "FUSESCHED_JOB_TOKEN", "FUSESCHED_CA", "FUSESCHED_CONTROLLER"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))


@contextlib.contextmanager
def pretend_cluster(folder: Path, cpus: int = 1) -> Iterator[str]:
    """A real controller (its files in ``folder``) and one agent, node ``n1`` with ``cpus``
    CPUs and 1 GiB, whose tasks only pretend to run (``FUSESCHED_FAKE_DURATION``,
    ``FUSESCHED_FAKE_EXIT_CODE``): the controller's URL."""
    from fusesched.agent.client import AgentClient
    from fusesched.agent.fake import FakeRuntime
    from fusesched.api.wire import NodeInventory
    from fusesched.controller.server import ControllerServer

    server = ControllerServer(folder / "ctl", port=0, long_poll_s=0.1).start()
    inventory = NodeInventory(name="n1", resources={"cpu": str(cpus), "memory": "1Gi"})
    agent = AgentClient(server.url, inventory, FakeRuntime(time.time), long_poll_s=0.1)
    agent.start()
    try:
        yield server.url
    finally:
        agent.stop()
        server.stop()
