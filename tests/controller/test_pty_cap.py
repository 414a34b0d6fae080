"""The cap on a user's open terminals (controller/pty_cap.py): a ``run --pty`` job or an
``srun --pty`` step past it is refused with a 400 saying why; a waiting job counts, as does
a session its run has not read to the end yet; a plain job, another user, and a terminal
freed by its job's end are not held back."""

from __future__ import annotations

import base64
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from tests.builders import Clock
from tests.controller.conftest import ONE_NODE
from tests.controller.test_pty_routes import PTY, SHELL, submit_pty
from tests.controller.test_running_limit import beat, started

from fusesched.api.app import create_app
from fusesched.api.wire import NodeInventory, TaskReport, TaskState
from fusesched.controller.logs import LogStore
from fusesched.controller.persist import Persistence
from fusesched.controller.records import ControllerConfig
from fusesched.controller.service import Controller


@pytest.fixture
def capped(tmp_path: Path) -> Iterator[Controller]:
    persist = Persistence(f"sqlite:///{tmp_path / 'db.sqlite'}")
    config = ControllerConfig(pty_sessions_per_user=2)
    ctl = Controller(persist, LogStore(tmp_path / "logs"), config, clock=Clock())
    ctl.register(NodeInventory.model_validate(ONE_NODE))
    yield ctl
    persist.close()


def test_a_users_terminals_past_the_cap_are_refused_saying_why(capped: Controller) -> None:
    client = TestClient(create_app(capped), raise_server_exceptions=False)
    running = submit_pty(client)
    submit_pty(client, hold=True)  # (waiting: it will open one too)
    third = client.post("/v1/jobs", json={"groups": [SHELL], "pty": PTY})
    assert third.status_code == 400, third.text
    assert "has 2 open terminals" in third.text and "at most 2 a user" in third.text
    assert client.post("/v1/jobs", json={"groups": [SHELL]}).status_code == 201  # no terminal
    bob = client.post("/v1/jobs", json={"groups": [SHELL], "pty": PTY, "user": "bob"})
    assert bob.status_code == 201, bob.text

    task = started(capped)[running]
    step = {
        "slots": {"n0": 1},
        "overlap": True,
        "tasks": [{"node": "n0", "argv": ["bash"]}],
        "pty": PTY,
    }
    refused = client.post(f"/v1/jobs/{running}/steps", json=step)
    assert refused.status_code == 400 and "has 2 open terminals" in refused.text

    # the running one ends; its output waits for its run in the relay: still open
    body = {"offset": 0, "data": base64.b64encode(b"bye\r\n").decode(), "eof": True, "wait": 0}
    assert client.post(f"/v1/agents/n0/pty/{task}/output", json=body).is_success
    beat(capped, [], reports=[TaskReport(task_id=task, state=TaskState.EXITED, exit_code=0)])
    capped.run_cycle()
    assert running not in capped.jobs
    again = client.post("/v1/jobs", json={"groups": [SHELL], "pty": PTY})
    assert again.status_code == 400, again.text
    page = client.get(f"/v1/jobs/{running}/pty/output", params={"offset": 0, "wait": 0})
    assert page.json()["closed"]  # (read to its end: closed, though its session stays a while)
    assert client.post("/v1/jobs", json={"groups": [SHELL], "pty": PTY}).status_code == 201


def test_terminals_opened_and_closed_one_after_another_never_reach_the_cap(
    capped: Controller,
) -> None:
    """A script's ``echo … | run --pty`` in a loop: each terminal read to its end and its
    job ended frees its place at once, not when its session is dropped."""
    client = TestClient(create_app(capped), raise_server_exceptions=False)
    for k in range(5):  # (the cap is 2)
        job = submit_pty(client)
        task = started(capped)[job]
        body = {"offset": 0, "data": base64.b64encode(b"x").decode(), "eof": True, "wait": 0}
        assert client.post(f"/v1/agents/n0/pty/{task}/output", json=body).is_success
        page = client.get(f"/v1/jobs/{job}/pty/output", params={"offset": 0, "wait": 0})
        assert page.json()["closed"], (k, page.text)
        done = TaskReport(task_id=task, state=TaskState.EXITED, exit_code=0)
        beat(capped, [], reports=[done])
        capped.run_cycle()
        assert job not in capped.jobs
    assert len(capped.pty_relay.sessions) == 5  # (kept a while, for an answer lost)


def test_a_batch_of_terminal_jobs_counts_each(capped: Controller) -> None:
    client = TestClient(create_app(capped), raise_server_exceptions=False)
    batch = [{"groups": [SHELL], "pty": PTY}] * 3
    refused = client.post("/v1/jobs/batch", json=batch)
    assert refused.status_code == 400 and "at most 2 a user" in refused.text, refused.text
    assert client.post("/v1/jobs/batch", json=batch[:2]).is_success
