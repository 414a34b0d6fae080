"""``restart.always`` in the controller (controller/endings.py): a task that exits 0 restarts
its job as a failure would — the gang stopped and started again in place (or requeued), with
the same back-off and ``max_restarts`` — as Kubernetes restarts a Deployment's pods; without
it the task just completes. A job cancelled before or while it waits to restart is not
restarted. The agent is played by hand (heartbeats and task reports), the clock moved by
hand."""

from __future__ import annotations

from typing import Any

import pytest
from fastapi.testclient import TestClient
from tests.builders import Clock
from tests.controller.test_running_limit import beat, submit

from fusesched.api.wire import TaskLaunch, TaskReport, TaskState
from fusesched.controller import failures
from fusesched.controller.service import Controller

REPLICA = {"resources": {"cpu": "2"}, "argv": ["serve"], "replicas": 2}


def service(client: TestClient, **restart: Any) -> str:
    """A two-replica service with ``restart``."""
    body = {"mode": "restart-in-place", "backoff_s": 0, **restart}
    job: str = submit(client, REPLICA, type="service", restart=body)["id"]
    return job


def launched(ctl: Controller, running: list[str]) -> list[TaskLaunch]:
    """Run a cycle; the agent takes its launches and says they run."""
    ctl.run_cycle()
    launches = beat(ctl, running).launch
    ids = [t.task_id for t in launches]
    reports = [TaskReport(task_id=t, state=TaskState.RUNNING, pid=1) for t in ids]
    beat(ctl, running + ids, reports=reports)
    return launches


def exits(ctl: Controller, task: str, code: int, running: list[str]) -> list[str]:
    """``task`` exited with ``code``, ``running`` still run: the kills the reply carries."""
    report = TaskReport(task_id=task, state=TaskState.EXITED, exit_code=code)
    return [k.task_id for k in beat(ctl, running, reports=[report]).kill]


def relaunch(ctl: Controller, clock: Clock, running: list[str]) -> list[TaskLaunch]:
    """The controller's health check restarts what is due; the launches it sends (the agent
    still runs ``running``)."""
    with ctl.work:
        failures.relaunch_due(ctl, clock.now)
    return beat(ctl, running).launch


def state(client: TestClient, job: str) -> str:
    shown: str = client.get(f"/v1/jobs/{job}").json()["state"]
    return shown


def event_reasons(ctl: Controller, job: str, kind: str) -> list[str]:
    ctl.run_cycle()  # (events are written with the cycle)
    rows = ctl.persist.store.events_for_job(job)
    return [r.event.data["reason"] for r in rows if r.event.kind == kind]


def test_a_task_exiting_0_restarts_the_gang_in_place(ctl: Controller, client: TestClient) -> None:
    job = service(client, always=True, max_restarts=5)
    first, second = (t.task_id for t in launched(ctl, []))
    assert exits(ctl, first, 0, [second]) == [second]  # the gang is stopped…
    assert exits(ctl, second, -15, []) == []
    again = relaunch(ctl, Clock(), [])  # (no back-off)
    assert [t.task_id for t in again] == [f"{job}-r1.main.0", f"{job}-r1.main.1"]
    assert {t.env["FUSESCHED_RESTART_COUNT"] for t in again} == {"1"}
    ctl.run_cycle()
    assert state(client, job) == "Running"
    assert event_reasons(ctl, job, "JobExit") == [f"task {first} exited 0: restart in place"]


def test_without_it_a_task_exiting_0_just_completes(ctl: Controller, client: TestClient) -> None:
    job = service(client, retry_application_failures=True, max_restarts=5)
    first, second = (t.task_id for t in launched(ctl, []))
    assert exits(ctl, first, 0, [second]) == []  # the other replica runs on
    assert relaunch(ctl, Clock(), [second]) == []
    ctl.run_cycle()
    assert state(client, job) == "Running"
    exits(ctl, second, 0, [])
    ctl.run_cycle()
    assert state(client, job) == "Completed"


def test_a_failing_exit_still_restarts_it(ctl: Controller, client: TestClient) -> None:
    job = service(client, always=True)
    first, second = (t.task_id for t in launched(ctl, []))
    assert exits(ctl, first, 3, [second]) == [second]
    exits(ctl, second, -15, [])
    assert len(relaunch(ctl, Clock(), [])) == 2
    assert event_reasons(ctl, job, "JobExit")[0].endswith(": restart in place")


def test_max_restarts_is_honoured(ctl: Controller, client: TestClient, clock: Clock) -> None:
    job = service(client, always=True, max_restarts=1)
    first, second = (t.task_id for t in launched(ctl, []))
    exits(ctl, first, 0, [second])
    exits(ctl, second, -15, [])
    third, fourth = (t.task_id for t in relaunch(ctl, clock, []))
    beat(ctl, [third, fourth])
    assert exits(ctl, third, 0, [fourth]) == []  # out of restarts: left to end as without it
    assert relaunch(ctl, clock, [fourth]) == []
    exits(ctl, fourth, 0, [])
    ctl.run_cycle()
    assert state(client, job) == "Completed"
    said = event_reasons(ctl, job, "JobExit")
    assert said == [
        f"task {first} exited 0: restart in place",
        *(
            f"task {t} exited 0: retry budget of 1 restarts exhausted; not restarted"
            for t in (third, fourth)
        ),
    ]


def test_a_cancelled_service_is_not_restarted(ctl: Controller, client: TestClient) -> None:
    job = service(client, always=True)
    first, second = (t.task_id for t in launched(ctl, []))
    assert client.post(f"/v1/jobs/{job}/cancel").status_code == 202
    ctl.run_cycle()  # the stop: both replicas are killed, and exit 0 on SIGTERM
    assert beat(ctl, [first, second]).kill
    exits(ctl, first, 0, [second])
    exits(ctl, second, 0, [])
    assert relaunch(ctl, Clock(), []) == []
    ctl.run_cycle()
    assert state(client, job) == "Cancelled"


def test_one_cancelled_while_it_waits_to_restart_ends(
    ctl: Controller, client: TestClient, clock: Clock
) -> None:
    job = service(client, always=True, backoff_s=60)
    first, second = (t.task_id for t in launched(ctl, []))
    exits(ctl, first, 0, [second])
    exits(ctl, second, -15, [])  # all exited: the restart waits out its back-off
    assert client.post(f"/v1/jobs/{job}/cancel").status_code == 202
    ctl.run_cycle()
    clock.now += 120
    assert relaunch(ctl, clock, []) == []
    ctl.run_cycle()
    assert state(client, job) == "Cancelled"


@pytest.mark.parametrize("always", [True, False])
def test_requeued_after_an_exit_0_with_mode_requeue(
    ctl: Controller, client: TestClient, always: bool
) -> None:
    restart = {"mode": "requeue-excluding-node", "backoff_s": 0, "always": always}
    job = submit(client, {**REPLICA, "replicas": 1}, type="service", restart=restart)["id"]
    (task,) = (t.task_id for t in launched(ctl, []))
    exits(ctl, task, 0, [])
    ctl.run_cycle()
    assert state(client, job) == ("Running" if always else "Completed")
    assert ctl.core.jobs[job].attempts == (1 if always else 0)
