"""Run a controller (and, for ``fusesched up``, local agents) in this process.

The HTTP server is uvicorn on a socket bound here first, so port 0 works (tests ask the
kernel for a free port and read it back) and the controller knows its own URL before any
task needs it.
"""

from __future__ import annotations

import logging
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import uvicorn

from fusesched.api.app import create_app
from fusesched.controller.logs import LogStore
from fusesched.controller.persist import Persistence
from fusesched.controller.service import Controller, ControllerConfig
from fusesched.policies.registry import CoreConfig

log = logging.getLogger("fusesched.controller")

DEFAULT_PORT = 8642


def sqlite_url(data_dir: Path) -> str:
    return f"sqlite:///{(data_dir / 'fusesched.db').resolve()}"


@dataclass
class ControllerServer:
    """A controller with its API, serving on ``host:port`` until :meth:`stop`."""

    data_dir: Path
    host: str = "127.0.0.1"
    port: int = DEFAULT_PORT
    database_url: str | None = None
    core: CoreConfig = field(default_factory=lambda: CoreConfig(placement="best-fit"))
    long_poll_s: float = 1.0
    node_timeout_s: float = 30.0
    clock: Callable[[], float] = time.time
    auto_schedule: bool = True  # False: the caller runs cycles (the parity test's lock-step)

    def __post_init__(self) -> None:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self._sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            self._sock.bind((self.host, self.port))
        except OSError as exc:
            self._sock.close()
            raise OSError(f"cannot listen on {self.host}:{self.port}: {exc.strerror}") from None
        self._sock.listen(2048)
        self.port = self._sock.getsockname()[1]
        url = self.database_url or sqlite_url(self.data_dir)
        self.persist = Persistence(url)
        self.controller = Controller(
            self.persist,
            LogStore(self.data_dir / "logs"),
            ControllerConfig(
                core=self.core,
                url=self.url,
                long_poll_s=self.long_poll_s,
                node_timeout_s=self.node_timeout_s,
            ),
            clock=self.clock,
        )
        config = uvicorn.Config(
            create_app(self.controller),
            log_level="warning",
            access_log=False,
            timeout_keep_alive=60,
            lifespan="off",
        )
        self._server = uvicorn.Server(config)
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        host = "127.0.0.1" if self.host in ("0.0.0.0", "") else self.host
        return f"http://{host}:{self.port}"

    def start(self) -> ControllerServer:
        if self.auto_schedule:
            self.controller.start()
        self._thread = threading.Thread(
            target=self._server.run, kwargs={"sockets": [self._sock]}, daemon=True
        )
        self._thread.start()
        deadline = time.monotonic() + 10
        while not self._server.started:
            if time.monotonic() > deadline or not self._thread.is_alive():
                raise RuntimeError("the API server did not start")
            time.sleep(0.01)
        return self

    def serve_forever(self) -> None:
        """Run until interrupted (Ctrl-C / SIGTERM) in the foreground."""
        self.start()
        try:
            while self._thread is not None and self._thread.is_alive():
                self._thread.join(0.5)
        finally:
            self.stop()

    def stop(self) -> None:
        self._server.should_exit = True
        self.controller.stop()
        if self._thread is not None:
            self._thread.join(timeout=10)
        self._sock.close()
        self.persist.close()
