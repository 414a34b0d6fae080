"""Run a controller (and, for ``fusesched up``, local agents) in this process.

The HTTP server is uvicorn on a socket bound here first, so port 0 works (tests ask the
kernel for a free port and read it back) and the controller knows its own URL before any
task needs it.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import ssl
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import uvicorn
from starlette.types import ASGIApp, Receive, Scope, Send

from fusesched.api.app import create_app
from fusesched.backends.federation_config import FederationConfig
from fusesched.controller.auth import Authenticator, Role
from fusesched.controller.inactive import DEFAULT_INACTIVE_LIMIT_S
from fusesched.controller.leader import Elector, check_url
from fusesched.controller.logs import LogStore
from fusesched.controller.notify_send import NotifyConfig
from fusesched.controller.persist import Persistence
from fusesched.controller.power import PowerConfig
from fusesched.controller.pty_cap import DEFAULT_PER_USER
from fusesched.controller.reconfigure import reload_core
from fusesched.controller.records import ControllerConfig
from fusesched.controller.retention import Retention
from fusesched.controller.service import Controller
from fusesched.policies.registry import CoreConfig
from fusesched.store import TokenKind

log = logging.getLogger("fusesched.controller")

DEFAULT_PORT = 8642
#: Where a controller with authentication writes its first cluster-admin token.
ADMIN_TOKEN_FILE = "admin.token"


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
    auth: bool = False  # require API tokens (``fusesched controller`` turns it on)
    tls_cert: Path | None = None  # serve HTTPS with this certificate (PEM) ...
    tls_key: Path | None = None  # ... and its key
    #: Take part in leader election (PostgreSQL only): wait as a standby until leading.
    standby: bool = False
    #: Pools and routing rules (``--pools FILE``); None: the local agents only.
    federation: FederationConfig | None = None
    #: Power saving (``--power FILE``); None: every node stays on.
    power: PowerConfig | None = None
    #: Job notifications by mail and webhook (``--smtp``, ``--notify-webhook``); None: none.
    notify: NotifyConfig | None = None
    #: The file ``core.tenancy`` was read from (``--tenancy FILE``): ``fusesched reconfigure``
    #: and SIGHUP re-read it, and a standby reads it again when it takes over.
    tenancy_file: Path | None = None
    #: Slurm's InactiveLimit (``--inactive-limit``): an attended job (salloc's, run's) whose
    #: command has been silent this many seconds is ended; 0: never.
    inactive_limit_s: float = DEFAULT_INACTIVE_LIMIT_S
    #: The most open terminals of one user (``--pty-sessions-per-user``: controller/pty_cap.py).
    pty_sessions_per_user: int = DEFAULT_PER_USER
    #: Retention (``--purge-after``): purge the jobs that ended this many seconds ago, about
    #: once an hour (controller/retention.py); None: never.
    purge_after_s: float | None = None

    def __post_init__(self) -> None:
        if (self.tls_cert is None) != (self.tls_key is None):
            raise ValueError("TLS needs both a certificate and its key")
        if self.tls_cert is not None and self.tls_key is not None:
            try:  # what the server thread would fail on, said here
                ssl.create_default_context(ssl.Purpose.CLIENT_AUTH).load_cert_chain(
                    self.tls_cert, self.tls_key
                )
            except OSError as exc:  # ssl.SSLError too: not PEM, key and certificate differ
                raise ValueError(
                    f"cannot use the TLS certificate {self.tls_cert} and key {self.tls_key}: {exc}"
                ) from None
        self.db_url = self.database_url or sqlite_url(self.data_dir)
        if self.standby:
            check_url(self.db_url)  # StandbyUnsupported (a ValueError) for SQLite
        self.data_dir.mkdir(parents=True, exist_ok=True)
        # IPPROTO_TCP, not 0: asyncio turns Nagle's algorithm off (TCP_NODELAY) on accepted
        # connections only for sockets that say they are TCP. Without it every reply on a
        # kept-alive connection (the agents' heartbeats) waited ~40 ms for a delayed ACK.
        self._sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
        self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            self._sock.bind((self.host, self.port))
        except OSError as exc:
            self._sock.close()
            raise OSError(f"cannot listen on {self.host}:{self.port}: {exc.strerror}") from None
        self._sock.listen(2048)
        self.port = self._sock.getsockname()[1]
        self.elector: Elector | None = None
        self.fenced: str | None = None  # why leadership was lost (standby mode), else None
        self._gate: StandbyGate | None = None
        self._ready = False  # the controller exists (at once, or once a standby leads)
        self.admin_token_path: Path | None = None
        self.retention: Retention | None = None  # (started with the scheduling loop)
        self._waiting = threading.Event()  # set: stop standing by
        app: ASGIApp
        if self.standby:
            self.elector = Elector(
                self.db_url, name=f"fusesched-controller {self.url}", on_lost=self._step_down
            )
            app = self._gate = StandbyGate()
        else:
            self._lead()
            app = self.app
        config = uvicorn.Config(
            app,
            log_level="warning",
            access_log=False,  # no request lines in logs (tokens ride in headers anyway)
            ssl_certfile=str(self.tls_cert) if self.tls_cert else None,
            ssl_keyfile=str(self.tls_key) if self.tls_key else None,
            timeout_keep_alive=60,
            lifespan="off",
        )
        self._server = uvicorn.Server(config)
        self._thread: threading.Thread | None = None

    def _lead(self) -> None:
        """Open the store and build the controller (whose recovery loads the store's state)
        and its API: at once, or for a standby once it holds leadership."""
        self.persist = Persistence(self.db_url)
        self.authenticator = Authenticator(self.persist.store, enabled=self.auth, clock=self.clock)
        self.admin_token_path = self._bootstrap() if self.auth else None
        core = self.core
        if self.standby:  # (taking over: the tenancy file may have changed since the start)
            core = reload_core(core, self.tenancy_file)
        self.controller = Controller(
            self.persist,
            LogStore(self.data_dir / "logs"),
            ControllerConfig(
                core=core,
                url=self.url,
                long_poll_s=self.long_poll_s,
                node_timeout_s=self.node_timeout_s,
                federation=self.federation,
                power=self.power,
                notify=self.notify,
                pools_dir=self.data_dir / "pools",
                tenancy_file=self.tenancy_file,
                inactive_limit_s=self.inactive_limit_s,
                pty_sessions_per_user=self.pty_sessions_per_user,
            ),
            clock=self.clock,
            auth=self.authenticator,
        )
        self.app = create_app(self.controller, self.authenticator)
        self._ready = True

    def _bootstrap(self) -> Path | None:
        """On the first start with authentication (no token stored yet), make a
        cluster-admin token and write it to ``<data-dir>/admin.token`` (mode 0600); the path
        is returned, the token itself is never logged."""
        if self.persist.store.count_tokens() > 0:
            return None
        token, _ = self.authenticator.issue(
            TokenKind.USER, user="admin", tenant="default", role=Role.CLUSTER_ADMIN.value
        )
        path = self.data_dir / ADMIN_TOKEN_FILE
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(token + "\n")
        os.chmod(path, 0o600)
        # a standby makes it only once it leads, long after its caller could print
        # ``admin_token_path``; otherwise the caller shows it (the CLI does), so only info
        level = logging.WARNING if self.standby else logging.INFO
        log.log(level, "first start: a cluster-admin token was written to %s", path)
        return path

    @property
    def url(self) -> str:
        host = "127.0.0.1" if self.host in ("0.0.0.0", "") else self.host
        scheme = "https" if self.tls_cert is not None else "http"
        return f"{scheme}://{host}:{self.port}"

    def start(self) -> ControllerServer:
        """Serve the API. A standby first answers 503 ``{"detail": "standby"}`` on every route
        and blocks here until it holds leadership, then builds the controller and serves."""
        if not self._ready:
            self._serve()  # the gate answers 503 while we wait
            self._wait_for_leadership()
            if self.auto_schedule:
                self.controller.start()
                self._retain()
            assert self._gate is not None
            self._gate.app = self.app
            return self
        if self.auto_schedule:
            self.controller.start()
            self._retain()
        self._serve()
        return self

    def _retain(self) -> None:
        """Start the retention thread (``purge_after_s``), off the scheduling path."""
        if self.purge_after_s is not None:
            self.retention = Retention(self.controller, self.purge_after_s).start()

    def _serve(self) -> None:
        self._thread = threading.Thread(
            target=self._server.run, kwargs={"sockets": [self._sock]}, daemon=True
        )
        self._thread.start()
        deadline = time.monotonic() + 10
        while not self._server.started:
            if time.monotonic() > deadline or not self._thread.is_alive():
                raise RuntimeError("the API server did not start")
            time.sleep(0.01)

    def _wait_for_leadership(self) -> None:
        assert self.elector is not None
        log.warning("controller at %s: standby, waiting for leadership", self.url)
        self.elector.acquire(block=True, stop=self._waiting)
        if not self.elector.is_leader:
            raise RuntimeError("stopped while standing by")
        started = time.monotonic()
        self._lead()
        log.warning(
            "controller at %s: now the leader (state loaded from the store in %.2f s)",
            self.url,
            time.monotonic() - started,
        )

    def _step_down(self, reason: str) -> None:
        """Fencing: leadership was lost (see :mod:`fusesched.controller.leader`). Stop acting
        at once: every route answers 503 again, scheduling stops and the server exits (a
        supervisor restarts the process, which then stands by)."""
        self.fenced = reason
        if self._gate is not None:
            self._gate.app = None
            self._gate.detail = "standby"
        self._server.should_exit = True
        if self.retention is not None:
            self.retention.stop(wait=False)
        if self._ready:
            self.controller.stop()

    def serve_forever(self) -> None:
        """Run until interrupted (Ctrl-C / SIGTERM) in the foreground, or until a leader
        loses leadership (then :attr:`fenced` says why)."""
        try:
            self.start()
            while self._thread is not None and self._thread.is_alive():
                self._thread.join(0.5)
        finally:
            self.stop()

    def stop(self) -> None:
        self._server.should_exit = True
        self._waiting.set()
        if self.retention is not None:
            self.retention.stop()
        if self._ready:
            self.controller.stop()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=10)
        self._sock.close()
        if self._ready:
            if self.fenced is None:
                self.persist.close()
            else:  # no last flush: another controller may lead by now
                self.persist.store.close()
        if self.elector is not None:  # after the last write: the next leader reads it all
            self.elector.release()


class StandbyGate:
    """The ASGI app of a standby controller: 503 ``{"detail": "standby"}`` on every route
    until :attr:`app` (the real API) is set, so clients and agents move on to the leader."""

    def __init__(self) -> None:
        self.app: ASGIApp | None = None
        self.detail = "standby"

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        app = self.app
        if app is not None:
            await app(scope, receive, send)
            return
        if scope["type"] != "http":
            return
        body = json.dumps({"detail": self.detail}).encode()
        await send(
            {
                "type": "http.response.start",
                "status": 503,
                "headers": [
                    (b"content-type", b"application/json"),
                    (b"content-length", str(len(body)).encode()),
                    (b"retry-after", b"1"),
                ],
            }
        )
        await send({"type": "http.response.body", "body": body, "more_body": False})
