"""``max_restarts`` across a controller restart: the core counts a job's restarts from zero
when it is handed the job again, so a restarted controller gave every recovered job a fresh
budget (a controller that crash-loops would restart a failing job for ever). The restarts
before it (``attempt_base``, read from the stored tasks) count too now. The agent is played
by hand."""

from __future__ import annotations

from pathlib import Path

from fastapi.testclient import TestClient
from tests.builders import Clock
from tests.controller.conftest import ONE_NODE, one_node_controller
from tests.controller.test_restart_always import event_reasons, exits, launched, relaunch, state
from tests.controller.test_running_limit import beat, submit

from fusesched.api.app import create_app
from fusesched.api.wire import NodeInventory, TaskLaunch
from fusesched.controller.logs import LogStore
from fusesched.controller.persist import Persistence
from fusesched.controller.service import Controller

ONE = {"resources": {"cpu": "2"}, "argv": ["train"], "replicas": 1}
ONCE = {
    "mode": "restart-in-place",
    "backoff_s": 0,
    "retry_application_failures": True,
    "max_restarts": 1,
}


def test_a_restart_before_the_controllers_counts_against_the_budget(
    tmp_path: Path, clock: Clock
) -> None:
    ctl = one_node_controller(tmp_path, clock)
    job: str = submit(TestClient(create_app(ctl)), ONE, restart=ONCE)["id"]
    (first,) = (t.task_id for t in launched(ctl, []))
    exits(ctl, first, 1, [])
    (again,) = (t.task_id for t in relaunch(ctl, clock, []))  # its one restart
    beat(ctl, [again])
    ctl.run_cycle()
    ctl.persist.close()  # the controller dies; the job runs on
    store = Persistence(f"sqlite:///{tmp_path / 'db.sqlite'}")
    restarted = Controller(store, LogStore(tmp_path / "logs"), clock=clock)
    running = [TaskLaunch(task_id=again, job_id=job)]
    restarted.register(NodeInventory.model_validate({**ONE_NODE, "running": running}))
    beat(restarted, [again])
    restarted.run_cycle()  # (adopted)
    exits(restarted, again, 1, [])
    assert relaunch(restarted, clock, []) == []  # the budget is spent: no third run
    restarted.run_cycle()
    assert state(TestClient(create_app(restarted)), job) == "Failed"
    said = event_reasons(restarted, job, "JobExit")
    assert said[-1].endswith("retry budget of 1 restarts exhausted"), said
    restarted.persist.close()
