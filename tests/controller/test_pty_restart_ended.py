"""A ``run --pty`` task that ends while the controller is away (controller/pty_tasks.py,
controller/adoption.py): its agent keeps the output it could not post, and the restarted
controller takes it though the node no longer runs the task and the job has ended by the
time the agent posts it; its client, asking after that end, waits for it, not told the job
has ended. A task the restarted controller started itself is not waited for so."""

from __future__ import annotations

import base64
from pathlib import Path
from typing import Any

from fastapi.testclient import TestClient
from tests.builders import Clock
from tests.controller.conftest import ONE_NODE, one_node_controller
from tests.controller.test_pty_routes import b64, submit_pty
from tests.controller.test_running_limit import beat, started

from fusesched.api.app import create_app
from fusesched.api.wire import NodeInventory, TaskReport, TaskState
from fusesched.controller.persist import Persistence
from fusesched.controller.service import Controller


def page(client: TestClient, job: str, offset: int) -> Any:
    return client.get(f"/v1/jobs/{job}/pty/output", params={"offset": offset, "wait": 0})


def terminal_then_restart(tmp_path: Path, clock: Clock) -> tuple[Controller, str, str]:
    """A ``run --pty`` job started on ``n0`` (its output ``a\r\n`` read), then a controller
    started anew on the same store: (the new one, the job, its task)."""
    ctl = one_node_controller(tmp_path, clock)
    client = TestClient(create_app(ctl), raise_server_exceptions=False)
    job = submit_pty(client, attended=True)
    task = started(ctl)[job]
    first = {"offset": 0, "data": b64(b"a\r\n"), "wait": 0}
    assert client.post(
        f"/v1/agents/n0/pty/{task}/output", json=first, params={"kept": 0}
    ).is_success
    assert base64.b64decode(page(client, job, 0).json()["data"]) == b"a\r\n"
    ctl.persist.close()
    store = Persistence(f"sqlite:///{tmp_path / 'db.sqlite'}")
    return Controller(store, ctl.logs, clock=clock), job, task


def test_the_last_output_of_a_task_that_ended_while_away_reaches_its_client(
    tmp_path: Path, clock: Clock
) -> None:
    again, job, task = terminal_then_restart(tmp_path, clock)
    agent = f"/v1/agents/n0/pty/{task}/output"
    try:
        client = TestClient(create_app(again), raise_server_exceptions=False)
        assert page(client, job, 3).status_code == 503  # (its node has not registered yet)
        # the shell exited meanwhile: its node no longer runs it, and says how it ended
        again.register(NodeInventory.model_validate({**ONE_NODE, "running": []}))
        ended = TaskReport(task_id=task, state=TaskState.EXITED, exit_code=0)
        beat(again, [], reports=[ended])
        again.run_cycle()
        assert job not in again.jobs
        waiting = page(client, job, 3)  # (the agent's post has not come yet)
        assert waiting.status_code == 200 and not waiting.json()["closed"], waiting.text

        last = {"offset": 3, "data": b64(b"bye\r\n"), "eof": True, "wait": 0}
        asked = client.post(agent, json=last, params={"kept": 0})
        assert asked.json() == {"offset": 8, "acked": 3}, asked.text
        shown = page(client, job, 3).json()
        assert (base64.b64decode(shown["data"]), shown["closed"]) == (b"bye\r\n", True)
    finally:
        again.persist.close()


def test_a_job_this_controller_started_and_ended_is_not_waited_for(
    tmp_path: Path, clock: Clock
) -> None:
    ctl = one_node_controller(tmp_path, clock)
    try:
        client = TestClient(create_app(ctl), raise_server_exceptions=False)
        job = submit_pty(client)
        ctl.run_cycle()
        (launch,) = beat(ctl, []).launch
        failed = TaskReport(task_id=launch.task_id, state=TaskState.FAILED_TO_START)
        beat(ctl, [], reports=[failed])
        ctl.run_cycle()
        assert job not in ctl.jobs
        refused = page(client, job, 0)
        assert refused.status_code == 409 and "has ended" in refused.text
    finally:
        ctl.persist.close()


def test_a_terminal_whose_node_never_comes_back_ends_without_a_session(
    tmp_path: Path, clock: Clock
) -> None:
    """503 while the node may come back; once the job is given up on (its node's timeout
    after the restart), its run is told it has ended at once, and the relay keeps nothing."""
    again, job, task = terminal_then_restart(tmp_path, clock)
    try:
        client = TestClient(create_app(again), raise_server_exceptions=False)
        assert page(client, job, 0).status_code == 503
        clock.now += again.config.node_timeout_s + 1
        again._check_nodes()
        again.run_cycle()
        assert job not in again.jobs
        ended = page(client, job, 0)
        assert ended.status_code == 409 and "has ended" in ended.text, ended.text
        assert again.pty_relay.sessions == {}
        # its node back late: the task, given up on, is not relayed (its agent lets go)
        late = client.post(
            f"/v1/agents/n0/pty/{task}/output", json={"offset": 0, "wait": 0}, params={"kept": 0}
        )
        assert late.status_code == 404 and again.pty_relay.sessions == {}, late.text
    finally:
        again.persist.close()
