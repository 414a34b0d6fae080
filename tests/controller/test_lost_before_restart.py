"""A run whose task was lost just before the controller died (chaos, seed 52: a restarted
agent came back without one task of a two-task gang, the controller decided to requeue the
job and was SIGKILLed 10 ms later; here the node's beat no longer lists the task): the
restarted controller read the lost task's exit -1 back as the run's first failure and failed
the job, its restart policy unused. Now it requeues the run, as the old controller had
decided; a ``--no-requeue`` job fails as a node failure (NODE_FAIL). The agent is played by
hand."""

from __future__ import annotations

from pathlib import Path

from fastapi.testclient import TestClient
from tests.builders import Clock
from tests.controller.conftest import ONE_NODE, one_node_controller
from tests.controller.test_restart_always import launched, state
from tests.controller.test_running_limit import beat, submit

from fusesched.api.app import create_app
from fusesched.api.wire import NodeInventory, TaskLaunch
from fusesched.controller.logs import LogStore
from fusesched.controller.persist import Persistence
from fusesched.controller.service import Controller

GANG = {"resources": {"cpu": "2"}, "argv": ["train"], "replicas": 2}


def _lost_then_restarted(tmp_path: Path, clock: Clock, **extra: object) -> tuple[Controller, str]:
    ctl = one_node_controller(tmp_path, clock)
    job: str = submit(TestClient(create_app(ctl)), GANG, **extra)["id"]
    first, second = (t.task_id for t in launched(ctl, []))
    # the agent's beat no longer lists the first task: lost (-1); the controller dies
    # before it carries out what it decided (no cycle)
    beat(ctl, [second])
    ctl.persist.close()
    store = Persistence(f"sqlite:///{tmp_path / 'db.sqlite'}")
    tasks = {t.task_id: t for t in store.store.tasks_for_job(job)}
    assert tasks[first].exit_code == -1 and tasks[second].end_time is None  # (as chaos left it)
    again = Controller(store, LogStore(tmp_path / "logs"), clock=clock)
    running = [TaskLaunch(task_id=second, job_id=job)]
    again.register(NodeInventory.model_validate({**ONE_NODE, "running": running}))
    beat(again, [second])
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
