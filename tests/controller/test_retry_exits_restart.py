"""The first failure of a run across a controller restart (controller/adoption.py): read back
from the store with its task's group, so a group's ``retry_exits: signals`` still sees the
permanent error (exit 1), not the exit of a task that failure stopped (-15, a signal), which
would restart the job and hide its exit code; and the tasks it should stop are stopped again
(the kill may never have left). The agent is played by hand."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from tests.builders import Clock
from tests.controller.conftest import ONE_NODE, one_node_controller
from tests.controller.test_restart_always import event_reasons, exits, launched, relaunch, state
from tests.controller.test_retry_exits import RESTART, TRAINER
from tests.controller.test_running_limit import beat, submit

from fusesched.api.app import create_app
from fusesched.api.wire import NodeInventory, TaskLaunch
from fusesched.controller.logs import LogStore
from fusesched.controller.persist import Persistence
from fusesched.controller.service import Controller


@pytest.fixture
def restarted(tmp_path: Path, clock: Clock) -> Iterator[tuple[Controller, str, str]]:
    """A two-task gang whose first task exited 1, its controller then restarted; the other
    task still runs and is adopted. (the new controller, the job, the task still running)"""
    ctl = one_node_controller(tmp_path, clock)
    job: str = submit(TestClient(create_app(ctl)), TRAINER, restart=RESTART)["id"]
    first, second = (t.task_id for t in launched(ctl, []))
    exits(ctl, first, 1, [second])
    ctl.persist.close()
    store = Persistence(f"sqlite:///{tmp_path / 'db.sqlite'}")
    again = Controller(store, LogStore(tmp_path / "logs"), clock=clock)
    running = [TaskLaunch(task_id=second, job_id=job)]
    again.register(NodeInventory.model_validate({**ONE_NODE, "running": running}))
    yield again, job, second
    again.persist.close()


def test_the_failure_before_it_still_fails_the_job(
    restarted: tuple[Controller, str, str], clock: Clock
) -> None:
    ctl, job, second = restarted
    beat(ctl, [second])
    ctl.run_cycle()  # (adopted)
    exits(ctl, second, -15, [])
    assert relaunch(ctl, clock, []) == []
    ctl.run_cycle()
    client = TestClient(create_app(ctl))
    assert state(client, job) == "Failed"
    assert client.get(f"/v1/jobs/{job}").json()["exit_code"] == 1
    (said,) = event_reasons(ctl, job, "JobExit")
    assert "exit code 1 of group main is a permanent error" in said


def test_the_tasks_it_stops_are_stopped_again(restarted: tuple[Controller, str, str]) -> None:
    ctl, _, second = restarted
    kills = beat(ctl, [second]).kill
    assert [(k.task_id, k.reason) for k in kills] == [(second, "a task of group main failed")]
