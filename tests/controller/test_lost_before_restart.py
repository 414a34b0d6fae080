"""A run whose task was lost just before the controller died (chaos, seed 52: a restarted
agent came back without one task of a two-task gang, the controller decided to requeue the
job and was SIGKILLed 10 ms later; here the node's beat no longer lists the task): the
restarted controller read the lost task's exit -1 back as the run's first failure and failed
the job, its restart policy unused. Now it requeues the run, as the old controller had
decided; a ``--no-requeue`` job fails as a node failure (NODE_FAIL), as does one whose
restart policy would not have restarted it (its budget spent, ``notify``). The agent is played
by hand."""

from __future__ import annotations

from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from tests.builders import Clock
from tests.controller.conftest import ONE_NODE, one_node_controller
from tests.controller.test_restart_always import exits, launched, state
from tests.controller.test_running_limit import beat, submit

from fusesched.api.app import create_app
from fusesched.api.wire import NodeInventory, TaskLaunch
from fusesched.controller.logs import LogStore
from fusesched.controller.persist import Persistence
from fusesched.controller.service import Controller

GANG = {"resources": {"cpu": "1"}, "argv": ["train"], "replicas": 3}


def _lost_then_restarted(
    tmp_path: Path, clock: Clock, stopped: bool = False, **extra: object
) -> tuple[Controller, str]:
    """The gang's first task lost, the controller killed before it carried out what it
    decided (no cycle); ``stopped``: its second task stopped by then (-15), the third not."""
    ctl = one_node_controller(tmp_path, clock)
    job: str = submit(TestClient(create_app(ctl)), GANG, **extra)["id"]
    first, second, third = (t.task_id for t in launched(ctl, []))
    beat(ctl, [second, third])  # the agent's beat no longer lists the first task: lost (-1)
    if stopped:
        clock.now += 1
        exits(ctl, second, -15, [third])
    ctl.persist.close()
    store = Persistence(f"sqlite:///{tmp_path / 'db.sqlite'}")
    tasks = {t.task_id: t for t in store.store.tasks_for_job(job)}
    assert tasks[first].exit_code == -1  # (as chaos left it)
    assert tasks[second].exit_code == (-15 if stopped else None)
    again = Controller(store, LogStore(tmp_path / "logs"), clock=clock)
    alive = [third] if stopped else [second, third]
    running = [TaskLaunch(task_id=task, job_id=job) for task in alive]
    again.register(NodeInventory.model_validate({**ONE_NODE, "running": running}))
    beat(again, alive)
    again.run_cycle()
    return again, job


def test_a_run_whose_task_was_lost_is_requeued_not_failed(tmp_path: Path, clock: Clock) -> None:
    ctl, job = _lost_then_restarted(tmp_path, clock)
    client = TestClient(create_app(ctl))
    assert state(client, job) in ("Pending", "Running"), client.get(f"/v1/jobs/{job}").json()
    assert client.get(f"/v1/jobs/{job}").json()["restarts"] == 1
    ctl.persist.close()


def test_one_that_may_not_be_requeued_fails_as_a_node_failure(tmp_path: Path, clock: Clock) -> None:
    ctl, job = _lost_then_restarted(tmp_path, clock, requeue=False)
    shown = TestClient(create_app(ctl)).get(f"/v1/jobs/{job}").json()
    assert shown["state"] == "Failed" and shown["reason"].startswith("NodeDown: "), shown
    ctl.persist.close()


def test_its_other_tasks_stopped_before_the_restart_do_not_fail_it(
    tmp_path: Path, clock: Clock
) -> None:
    """The old controller had stopped one of the gang's other tasks (-15) for the requeue
    before it died: that exit is the stop's, not the run's first failure (the loss came
    first); it failed the job once the third was gone."""
    ctl, job = _lost_then_restarted(tmp_path, clock, stopped=True)
    shown = TestClient(create_app(ctl)).get(f"/v1/jobs/{job}").json()
    assert shown["state"] in ("Pending", "Running") and shown["restarts"] == 1, shown
    ctl.persist.close()


@pytest.mark.parametrize("policy", [{"max_restarts": 0}, {"mode": "notify"}])
def test_one_its_restart_policy_would_not_restart_fails_as_a_node_failure(
    tmp_path: Path, clock: Clock, policy: dict[str, object]
) -> None:
    """The old controller would have failed it (NODE_FAIL: its budget spent, or ``notify``);
    the new one does not run it again."""
    ctl, job = _lost_then_restarted(tmp_path, clock, restart=policy)
    shown = TestClient(create_app(ctl)).get(f"/v1/jobs/{job}").json()
    assert shown["state"] == "Failed" and shown["reason"].startswith("NodeDown: "), shown
    assert shown["restarts"] == 0
    ctl.persist.close()
