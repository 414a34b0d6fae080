"""A stopping agent tells the controller its node is leaving before it kills its tasks, and
never waits on that for longer than ``LEAVE_TIMEOUT_S``: a controller that hangs, is gone, is a
standby or is older than the route (404) does not stop the stop. The controller here is a
small real HTTP server that answers as the controller does (register, long-poll heartbeats)
and answers ``/v1/agents/leaving`` as each test says."""

from __future__ import annotations

import json
import os
import socket
import threading
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx
import pytest

from fusesched.agent.client import AgentClient
from fusesched.agent.leaving import LEAVE_TIMEOUT_S, tell_leaving
from fusesched.agent.runtime import ProcessRuntime
from fusesched.api.wire import HeartbeatReply, NodeInventory

from .helpers import launch

INVENTORY = NodeInventory(name="node-x", resources={"cpu": "2", "memory": "1Gi"})


class Controller(ThreadingHTTPServer):
    """Answers ``/v1/agents/leaving`` with ``leaving``: an HTTP status, or ``"hang"`` (no
    answer for 30 s). Records each leaving call: (its JSON body, its authorization header,
    whether ``watch_pgid``'s process group was still alive when it came)."""

    daemon_threads = True

    def __init__(self, leaving: int | str = 200) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.leaving = leaving
        self.calls: list[tuple[dict[str, Any], str, bool]] = []
        self.watch_pgid: int | None = None
        self.release = threading.Event()  # ends a hung answer
        threading.Thread(target=self.serve_forever, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"

    def close(self) -> None:
        self.release.set()
        self.shutdown()
        self.server_close()


class _Handler(BaseHTTPRequestHandler):
    server: Controller

    def log_message(self, *_: object) -> None:  # quiet
        pass

    def do_POST(self) -> None:  # (the name http.server calls)
        body = self.rfile.read(int(self.headers.get("content-length", 0)))
        path = self.path.split("?", 1)[0]
        if path == "/v1/agents/register":
            self._answer(201, {"node": INVENTORY.name})
        elif path == "/v1/agents/heartbeat":
            time.sleep(0.1)  # a short long poll with nothing to hand out
            self._answer(200, HeartbeatReply().model_dump(mode="json"))
        elif path == "/v1/agents/leaving":
            pgid = self.server.watch_pgid
            alive = pgid is not None and _alive(pgid)
            self.server.calls.append((json.loads(body), self.headers["authorization"], alive))
            if self.server.leaving == "hang":
                self.server.release.wait(30)
                return
            status = int(self.server.leaving)
            self._answer(status, {"node": INVENTORY.name} if status == 200 else {"detail": "x"})
        else:
            self._answer(404, {"detail": "Not Found"})

    def _answer(self, status: int, body: dict[str, Any]) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


def _alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    return True


Serve = Callable[[int | str], Controller]


@pytest.fixture
def serve() -> Iterator[Serve]:
    """Starts a :class:`Controller` answering leaving calls so (closed after the test)."""
    made: list[Controller] = []

    def start(leaving: int | str) -> Controller:
        made.append(Controller(leaving))
        return made[-1]

    yield start
    for server in made:
        server.close()


def running_agent(controller: Controller, runtime: ProcessRuntime) -> tuple[AgentClient, int]:
    """An agent of ``controller`` running one ``sleep`` task: the agent and the task's process
    group (which the controller watches)."""
    client = AgentClient(controller.url, INVENTORY, runtime, long_poll_s=0.2, token="fsk_node_x")
    client.start()
    client._obey(HeartbeatReply(launch=[launch("j1.0.0", "sleep", "60")]))
    [watch] = runtime.watches()
    assert watch.pgid is not None and _alive(watch.pgid)
    controller.watch_pgid = watch.pgid
    return client, watch.pgid


def test_a_stopping_agent_says_it_is_leaving_before_it_kills_its_tasks(
    runtime: ProcessRuntime, serve: Serve
) -> None:
    controller = serve(200)
    client, pgid = running_agent(controller, runtime)
    client.stop()
    assert controller.calls == [({"node": "node-x"}, "Bearer fsk_node_x", True)]
    assert not _alive(pgid)  # then killed


@pytest.mark.parametrize("kill_tasks, leave", [(False, True), (True, False)])
def test_a_stop_that_keeps_its_tasks_or_is_told_not_to_says_nothing(
    runtime: ProcessRuntime, serve: Serve, kill_tasks: bool, leave: bool
) -> None:
    controller = serve(200)
    client, pgid = running_agent(controller, runtime)
    client.stop(kill_tasks=kill_tasks, leave=leave)
    assert controller.calls == []
    assert _alive(pgid) is not kill_tasks


@pytest.mark.parametrize("answer", [404, 422, 500])
def test_a_controller_that_refuses_or_does_not_know_the_route_does_not_stop_the_stop(
    runtime: ProcessRuntime, serve: Serve, answer: int
) -> None:
    controller = serve(answer)  # 404: a controller older than the route
    client, pgid = running_agent(controller, runtime)
    assert client.leave() is False
    client.stop()
    assert len(controller.calls) == 2  # (the one above, and the stop's)
    assert not _alive(pgid)


def test_a_hung_controller_holds_the_stop_no_longer_than_the_leave_timeout(
    runtime: ProcessRuntime, serve: Serve
) -> None:
    controller = serve("hang")
    client, pgid = running_agent(controller, runtime)
    started = time.monotonic()
    client.stop()
    took = time.monotonic() - started
    assert len(controller.calls) == 1
    assert not _alive(pgid)
    # the leave gives up after its timeout; killing the task and the threads' last beat
    # (their long poll is 0.1 s here) add little
    assert LEAVE_TIMEOUT_S - 0.2 < took < LEAVE_TIMEOUT_S + 3.0, took


def test_a_controller_that_is_gone_does_not_hold_the_stop(
    runtime: ProcessRuntime, serve: Serve
) -> None:
    controller = serve(200)
    client, pgid = running_agent(controller, runtime)
    controller.close()  # the controller is gone: connections are refused
    started = time.monotonic()
    client.stop()
    assert time.monotonic() - started < LEAVE_TIMEOUT_S + 3.0
    assert not _alive(pgid)


def test_the_leaving_goes_to_the_controller_that_leads(serve: Serve) -> None:
    standby, leader = serve(503), serve(200)
    with socket.socket() as sock:  # a port nothing listens on: a controller that is down
        sock.bind(("127.0.0.1", 0))
        down = f"http://127.0.0.1:{sock.getsockname()[1]}"
    with httpx.Client() as http:
        assert tell_leaving(http, [down, standby.url, leader.url], "node-x")
        assert [c[0] for c in standby.calls + leader.calls] == [{"node": "node-x"}] * 2
        assert not tell_leaving(http, [down, standby.url], "node-x")  # none leads: not taken


def test_a_controller_that_answers_a_byte_at_a_time_holds_it_no_longer_than_its_timeout() -> None:
    """httpx's timeouts bound each read, not the request: an answer that trickles in (a slow
    proxy, a half-dead link) must not hold the stop past the leave's timeout."""
    answer = b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 2\r\n\r\n{}"
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()

        def trickle() -> None:
            conn, _ = server.accept()
            with conn:
                conn.recv(65536)
                for byte in answer:  # 0.1 s a byte: some 8 s in all
                    try:
                        conn.sendall(bytes([byte]))
                    except OSError:  # (the client gave up)
                        return
                    time.sleep(0.1)

        threading.Thread(target=trickle, daemon=True).start()
        with httpx.Client() as http:
            started = time.monotonic()
            taken = tell_leaving(http, [f"http://127.0.0.1:{server.getsockname()[1]}"], "n", 0.5)
            took = time.monotonic() - started
    assert not taken
    assert took < 1.5, took


def test_a_name_that_takes_long_to_resolve_holds_it_no_longer_than_its_timeout(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Name resolution (getaddrinfo) has no timeout of its own in httpx: a stalled DNS server
    must not hold the stop either."""
    resolve = socket.getaddrinfo

    def slow(*args: Any, **kwargs: Any) -> Any:
        time.sleep(2.0)
        return resolve(*args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", slow)
    with httpx.Client() as http:
        started = time.monotonic()
        taken = tell_leaving(http, ["http://controller.invalid:8642"], "n", 0.5)
        took = time.monotonic() - started
    assert not taken
    assert took < 1.5, took
