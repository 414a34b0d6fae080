"""A terminal through a controller restart (api/pty_routes.py, controller/pty_tasks.py), the
agent and the client played by hand: until the node's agent has reported the task again
both ends are asked to wait (503), not told the terminal is gone; then the new session takes
the two ends where they had come to, and what the old one held is sent again."""

from __future__ import annotations

import base64
from pathlib import Path
from typing import Any

from fastapi.testclient import TestClient
from tests.builders import Clock
from tests.controller.conftest import ONE_NODE, one_node_controller
from tests.controller.test_pty_routes import submit_pty
from tests.controller.test_running_limit import started

from fusesched.api.app import create_app
from fusesched.api.wire import NodeInventory
from fusesched.controller.persist import Persistence
from fusesched.controller.service import Controller


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def text(page: dict[str, Any]) -> bytes:
    return base64.b64decode(page["data"])


def test_a_restarted_controller_relays_a_running_terminal_again(
    tmp_path: Path, clock: Clock
) -> None:
    ctl = one_node_controller(tmp_path, clock)
    client = TestClient(create_app(ctl), raise_server_exceptions=False)
    job = submit_pty(client, attended=True)
    task = started(ctl)[job]
    launch = ctl.tasks[task][1].launch
    agent = f"/v1/agents/n0/pty/{task}"
    typed = {"offset": 0, "data": b64(b"ls\r"), "wait": 0}
    assert client.post(f"/v1/jobs/{job}/pty/input", json=typed, params={"kept": 0}).is_success
    assert text(client.get(f"{agent}/input", params={"wait": 0}).json()) == b"ls\r"
    out = {"offset": 0, "data": b64(b"file\r\n"), "wait": 0}
    assert client.post(f"{agent}/output", json=out, params={"kept": 0}).json()["acked"] == 0
    page = client.get(f"/v1/jobs/{job}/pty/output", params={"offset": 0, "wait": 0}).json()
    assert (text(page), page["offset"]) == (b"file\r\n", 6)
    ctl.persist.close()

    again = Controller(Persistence(f"sqlite:///{tmp_path / 'db.sqlite'}"), ctl.logs, clock=clock)
    try:
        client = TestClient(create_app(again), raise_server_exceptions=False)
        waiting = client.get(f"/v1/jobs/{job}/pty/output", params={"offset": 6, "wait": 0})
        assert waiting.status_code == 503 and "once node n0 has reported it" in waiting.text
        polled = client.get(f"{agent}/input", params={"offset": 3, "size_seq": 1, "wait": 0})
        assert polled.status_code == 503, polled.text  # (not 409: the agent would let go)

        again.register(NodeInventory.model_validate({**ONE_NODE, "running": [launch]}))
        # the agent kept its output from 0 on (the client's reading was not said to it yet)
        more = {"offset": 6, "data": b64(b"more\r\n"), "wait": 0}
        asked = client.post(f"{agent}/output", json=more, params={"kept": 0}).json()
        assert asked == {"offset": 0, "acked": 0}  # send again from 0
        resent = {"offset": 0, "data": b64(b"file\r\nmore\r\n"), "wait": 0}
        assert (
            client.post(f"{agent}/output", json=resent, params={"kept": 0}).json()["offset"] == 12
        )
        page = client.get(f"/v1/jobs/{job}/pty/output", params={"offset": 6, "wait": 0}).json()
        assert (text(page), page["offset"]) == (b"more\r\n", 12)

        typed = {"offset": 3, "data": b64(b"pwd\r"), "wait": 0}
        took = client.post(f"/v1/jobs/{job}/pty/input", json=typed, params={"kept": 3}).json()
        assert took == {"offset": 7, "acked": 3}
        got = client.get(f"{agent}/input", params={"offset": 3, "size_seq": 1, "wait": 0}).json()
        assert text(got) == b"pwd\r" and not got["ended"]
    finally:
        again.persist.close()
