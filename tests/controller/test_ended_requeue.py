"""Requeueing an ended job through the API (POST /v1/jobs/{id}/requeue on a completed,
failed or cancelled job; controller/ended_requeue.py): it waits again under its id and runs
afresh, ``Restarts`` one more, its earlier run kept in its events; ``hold`` keeps it held;
a ``--no-requeue`` job is refused; a restarted controller requeues it too."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from fastapi.testclient import TestClient
from tests.builders import Clock
from tests.controller import test_dependency_kinds as many  # (a node running several jobs)
from tests.controller.conftest import one_node_controller

from fusesched.api.app import create_app
from fusesched.api.wire import Heartbeat, TaskReport, TaskState
from fusesched.controller.service import Controller

WHOLE = {"resources": {"cpu": "4"}, "argv": ["true"]}  # the whole node


def submit(client: TestClient, **extra: Any) -> dict[str, Any]:
    answer = client.post("/v1/jobs", json={"groups": [WHOLE], **extra})
    assert answer.status_code == 201, answer.text
    return dict(answer.json())


def launched(ctl: Controller) -> dict[str, str]:
    ctl.run_cycle()
    reply = ctl.heartbeat(Heartbeat(node="n0", running=[]), wait_s=0)
    return {launch.job_id: launch.task_id for launch in reply.launch}


def finish(ctl: Controller, task: str, code: int = 0) -> None:
    report = TaskReport(task_id=task, state=TaskState.EXITED, exit_code=code)
    ctl.heartbeat(Heartbeat(node="n0", reports=[report], running=[]), wait_s=0)
    ctl.run_cycle()


def view(client: TestClient, job_id: str) -> dict[str, Any]:
    return dict(client.get(f"/v1/jobs/{job_id}").json())


def ran(ctl: Controller, client: TestClient, code: int = 0, **extra: Any) -> tuple[str, str]:
    """A job that ran once and ended with ``code``: its id and its first run's task."""
    job = submit(client, **extra)["id"]
    task = launched(ctl)[job]
    finish(ctl, task, code)
    return job, task


def test_a_failed_job_is_requeued_and_runs_again(ctl: Controller, client: TestClient) -> None:
    job, task = ran(ctl, client, code=3)
    assert view(client, job)["state"] == "Failed"
    answer = client.post(f"/v1/jobs/{job}/requeue", json={"reason": "input fixed"})
    assert answer.status_code == 200, answer.text
    assert answer.json()["requeued"] == [job]
    shown = view(client, job)
    assert (shown["state"], shown["exit_code"], shown["end_time"]) == ("Pending", None, None)
    assert shown["restarts"] == 1 and "requeued (input fixed)" in shown["reason"]
    again = launched(ctl)
    assert list(again) == [job] and again[job] != task  # a new run, a new task
    finish(ctl, again[job])
    shown = view(client, job)
    assert (shown["state"], shown["exit_code"], shown["restarts"]) == ("Completed", 0, 1)
    kinds = [e.event.kind for e in ctl.persist.store.events_for_job(job)]
    assert kinds.count("JobRequeued") == 1  # (the failed run stays in its events)


def test_requeuehold_of_a_completed_job_keeps_it_held(ctl: Controller, client: TestClient) -> None:
    job, _ = ran(ctl, client)
    body = {"reason": "wait for the fix", "hold": True}
    assert client.post(f"/v1/jobs/{job}/requeue", json=body).json()["requeued"] == [job]
    assert launched(ctl) == {}
    shown = view(client, job)
    assert (shown["state"], shown["phase"]) == ("Pending", "held")
    assert client.post(f"/v1/jobs/{job}/release").json()["released"] == [job]
    assert list(launched(ctl)) == [job]


def test_a_no_requeue_job_that_ended_is_refused(ctl: Controller, client: TestClient) -> None:
    job, _ = ran(ctl, client, requeue=False)
    answer = client.post(f"/v1/jobs/{job}/requeue", json={})
    assert answer.status_code == 409
    assert "is not to be requeued (requeue: false; sbatch --no-requeue)" in answer.text
    assert view(client, job)["state"] == "Completed"


def test_a_cancelled_waiting_job_is_requeued(ctl: Controller, client: TestClient) -> None:
    blocker = submit(client)["id"]
    task = launched(ctl)[blocker]
    job = submit(client)["id"]
    assert client.post(f"/v1/jobs/{job}/cancel").status_code == 202
    ctl.run_cycle()
    assert view(client, job)["state"] == "Cancelled"
    assert client.post(f"/v1/jobs/{job}/requeue", json={}).json()["requeued"] == [job]
    finish(ctl, task)
    assert list(launched(ctl)) == [job]


def test_an_arrays_ended_members_are_requeued(ctl: Controller, client: TestClient) -> None:
    made = submit(client, array={"start": 0, "stop": 1})
    for member in made["ids"]:
        finish(ctl, launched(ctl)[member])
    answer = client.post(f"/v1/jobs/{made['id']}/requeue", json={})
    assert answer.json()["requeued"] == made["ids"]
    assert [view(client, m)["state"] for m in made["ids"]] == ["Pending", "Pending"]


def test_a_restarted_controller_requeues_a_job_that_ended_before(
    tmp_path: Path, clock: Clock
) -> None:
    ctl = one_node_controller(tmp_path, clock)
    client = TestClient(create_app(ctl), raise_server_exceptions=False)
    job, task = ran(ctl, client, code=1)
    ctl.persist.close()
    again = one_node_controller(tmp_path, clock)
    try:
        client = TestClient(create_app(again), raise_server_exceptions=False)
        again.run_cycle()  # (its node registered again)
        assert job not in again.core.jobs
        assert client.post(f"/v1/jobs/{job}/requeue", json={}).json()["requeued"] == [job]
        started = launched(again)
        assert list(started) == [job] and started[job] != task
        assert view(client, job)["restarts"] == 1
    finally:
        again.persist.close()


QUARTER = {"resources": {"cpu": "1"}, "argv": ["true"]}


def on_array(client: TestClient, kind: str, array_id: str) -> str:
    dependencies = [{"kind": kind, "job_id": array_id}]
    answer = client.post("/v1/jobs", json={"groups": [QUARTER], "dependencies": dependencies})
    assert answer.status_code == 201, answer.text
    return str(answer.json()["id"])


def test_a_rerun_member_counts_for_jobs_on_its_array(ctl: Controller, client: TestClient) -> None:
    """A job cancelled by a member's failure (``afterok`` on the whole array) can be requeued
    once the member is rerun and completed, and runs."""
    made = client.post("/v1/jobs", json={"groups": [QUARTER], "array": {"start": 0, "stop": 1}})
    arr, members = made.json()["id"], made.json()["ids"]
    red = on_array(client, "afterok", arr)
    tasks = many.launched(ctl)
    many.exit_task(ctl, tasks[members[0]], 0)
    many.exit_task(ctl, tasks[members[1]], 3)
    assert view(client, red)["state"] == "Cancelled"
    assert client.post(f"/v1/jobs/{members[1]}/requeue", json={}).status_code == 200
    many.exit_task(ctl, many.launched(ctl)[members[1]], 0)
    answer = client.post(f"/v1/jobs/{red}/requeue", json={})
    assert answer.status_code == 200, answer.text
    assert red in many.launched(ctl)


def test_a_requeued_member_holds_back_afterany_on_its_array(
    ctl: Controller, client: TestClient
) -> None:
    made = client.post("/v1/jobs", json={"groups": [QUARTER], "array": {"start": 0, "stop": 1}})
    arr, members = made.json()["id"], made.json()["ids"]
    first = on_array(client, "afterany", arr)
    tasks = many.launched(ctl)
    for member in members:
        many.exit_task(ctl, tasks[member], 0)
    assert first in many.launched(ctl)
    body = {"hold": True}
    assert client.post(f"/v1/jobs/{members[1]}/requeue", json=body).status_code == 200
    later = on_array(client, "afterany", arr)
    assert later not in many.launched(ctl)
    assert view(client, later)["state"] == "Pending"
