"""A group's ``retry_exits: signals`` (Kubeflow's ``restartPolicy: ExitCode``) in the controller
(controller/endings.py): with ``restart.retry_application_failures``, a gang whose first
failing task exited 1-127 fails for good (a permanent error: no restart, an event says why);
one whose first failing task was killed by a signal (exit 128-255, or a signal on a bare
process) restarts as before. The agent is played by hand."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient
from tests.builders import Clock
from tests.controller.test_restart_always import event_reasons, exits, launched, relaunch, state
from tests.controller.test_running_limit import beat, submit

from fusesched.api.wire import TaskReport, TaskState
from fusesched.controller.service import Controller

TRAINER = {"resources": {"cpu": "2"}, "argv": ["train"], "replicas": 2, "retry_exits": "signals"}
RESTART = {"mode": "restart-in-place", "backoff_s": 0, "retry_application_failures": True}


def first_fails(ctl: Controller, client: TestClient, code: int) -> tuple[str, list[str]]:
    """A two-task gang whose first task exits ``code``; the other is stopped (-15)."""
    job: str = submit(client, TRAINER, restart=RESTART)["id"]
    first, second = (t.task_id for t in launched(ctl, []))
    assert exits(ctl, first, code, [second]) == [second]
    exits(ctl, second, -15, [])
    return job, [first, second]


def test_an_exit_below_128_fails_the_job_without_a_restart(
    ctl: Controller, client: TestClient
) -> None:
    job, _ = first_fails(ctl, client, 1)
    assert relaunch(ctl, Clock(), []) == []
    ctl.run_cycle()
    assert state(client, job) == "Failed"
    (said,) = event_reasons(ctl, job, "JobExit")
    assert "exit code 1 of group main is a permanent error, not restarted" in said


@pytest.mark.parametrize("code", [137, 143, -9])
def test_an_exit_by_a_signal_restarts_the_job(
    ctl: Controller, client: TestClient, code: int
) -> None:
    job, _ = first_fails(ctl, client, code)
    again = relaunch(ctl, Clock(), [])
    assert [t.task_id for t in again] == [f"{job}-r1.main.0", f"{job}-r1.main.1"]
    ctl.run_cycle()
    assert state(client, job) == "Running"


def test_without_it_any_failing_exit_restarts(ctl: Controller, client: TestClient) -> None:
    submit(client, {**TRAINER, "retry_exits": "all"}, restart=RESTART)
    first, second = (t.task_id for t in launched(ctl, []))
    exits(ctl, first, 1, [second])
    exits(ctl, second, -15, [])
    assert len(relaunch(ctl, Clock(), [])) == 2


def test_a_task_that_never_started_is_no_permanent_error(
    ctl: Controller, client: TestClient
) -> None:
    """Its 127 is the agent's (no image, staging failed, a node's trouble), not its command's
    exit: restarted, as the operator restarts a pod whose container could not start."""
    submit(client, TRAINER, restart=RESTART)
    first, second = (t.task_id for t in launched(ctl, []))
    report = TaskReport(task_id=first, state=TaskState.FAILED_TO_START, reason="no image")
    beat(ctl, [second], reports=[report])
    exits(ctl, second, -15, [])
    assert len(relaunch(ctl, Clock(), [])) == 2
