"""A group's ``retry_exits: never`` (Kubeflow's ``restartPolicy: Never`` beside a replica type
that restarts) in the controller (controller/endings.py): with
``restart.retry_application_failures``, a gang whose first failing task is of that group fails
for good whatever its exit, a signal's too (an event says why); one whose first failing task
is of another group restarts as before. The agent is played by hand."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient
from tests.builders import Clock
from tests.controller.test_restart_always import event_reasons, exits, launched, relaunch, state
from tests.controller.test_retry_exits import RESTART

from fusesched.controller.service import Controller

#: A Master that restarts (OnFailure) and Workers that never do.
GROUPS = [
    {"name": "master", "resources": {"cpu": "1"}, "argv": ["train"]},
    {"name": "worker", "resources": {"cpu": "1"}, "argv": ["train"], "replicas": 2},
]


def fails_first(ctl: Controller, client: TestClient, which: int, code: int) -> str:
    """The gang's task ``which`` (0: the master, 1 and 2: the workers) exits ``code``; the
    others are stopped (-15)."""
    groups = [GROUPS[0], {**GROUPS[1], "retry_exits": "never"}]
    answer = client.post("/v1/jobs", json={"groups": groups, "restart": RESTART})
    assert answer.status_code == 201, answer.text
    ids = [t.task_id for t in launched(ctl, [])]
    others = [t for t in ids if t != ids[which]]
    assert sorted(exits(ctl, ids[which], code, others)) == sorted(others)
    for i, task in enumerate(others):
        exits(ctl, task, -15, others[i + 1 :])
    job: str = answer.json()["id"]
    return job


@pytest.mark.parametrize("code", [1, 137, -9])
def test_any_failing_exit_of_the_group_fails_the_job(
    ctl: Controller, client: TestClient, code: int
) -> None:
    job = fails_first(ctl, client, 2, code)
    assert relaunch(ctl, Clock(), []) == []
    ctl.run_cycle()
    assert state(client, job) == "Failed"
    assert client.get(f"/v1/jobs/{job}").json()["exit_code"] == code
    (said,) = event_reasons(ctl, job, "JobExit")
    assert f"exit code {code} of group worker is a permanent error, not restarted" in said
    assert "(retry_exits: never restarts the job after a failing exit of the group)" in said


def test_a_failing_exit_of_another_group_restarts_the_gang(
    ctl: Controller, client: TestClient
) -> None:
    job = fails_first(ctl, client, 0, 1)
    again = relaunch(ctl, Clock(), [])
    assert [t.task_id for t in again] == [
        f"{job}-r1.master.0",
        f"{job}-r1.worker.0",
        f"{job}-r1.worker.1",
    ]
    ctl.run_cycle()
    assert state(client, job) == "Running"
