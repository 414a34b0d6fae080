"""Holding and releasing jobs through the API (controller/holds.py, POST /v1/jobs/{id}/hold
and /release): a held job stays pending and never starts until released; the hold outlives a
controller restart; running and ended jobs are refused with a 409."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from tests.builders import Clock
from tests.controller.conftest import one_node_controller

from fusesched.api.app import create_app
from fusesched.api.wire import Heartbeat, TaskReport, TaskState
from fusesched.controller.service import Controller

WHOLE = {"resources": {"cpu": "4"}, "argv": ["true"]}  # the whole node


def submit(client: TestClient, **extra: Any) -> dict[str, Any]:
    answer = client.post("/v1/jobs", json={"groups": [WHOLE], **extra})
    assert answer.status_code == 201, answer.text
    return dict(answer.json())


def launched(ctl: Controller, running: tuple[str, ...] = ()) -> dict[str, str]:
    ctl.run_cycle()
    reply = ctl.heartbeat(Heartbeat(node="n0", running=list(running)), wait_s=0)
    return {launch.job_id: launch.task_id for launch in reply.launch}


def finish(ctl: Controller, task: str) -> None:
    report = TaskReport(task_id=task, state=TaskState.EXITED, exit_code=0)
    ctl.heartbeat(Heartbeat(node="n0", reports=[report], running=[]), wait_s=0)
    ctl.run_cycle()


def ended_running_pending(ctl: Controller, client: TestClient) -> tuple[str, str, str]:
    """Three whole-node jobs: one ended, one running, one waiting behind it."""
    done = submit(client)["id"]
    finish(ctl, launched(ctl)[done])
    running = submit(client)["id"]
    launched(ctl)
    return done, running, submit(client)["id"]


def view(client: TestClient, job_id: str) -> dict[str, Any]:
    return dict(client.get(f"/v1/jobs/{job_id}").json())


def test_a_held_job_does_not_start_until_released(ctl: Controller, client: TestClient) -> None:
    first = submit(client)["id"]
    task = launched(ctl)[first]
    second = submit(client)["id"]
    third = submit(client)["id"]
    answer = client.post(f"/v1/jobs/{second}/hold", json={"reason": "  input not ready "})
    assert answer.status_code == 200, answer.text
    assert answer.json() == {"held": [second], "released": [], "requeued": []}
    shown = view(client, second)
    assert (shown["state"], shown["phase"], shown["reason"]) == (
        "Pending",
        "held",
        "held: input not ready",
    )
    finish(ctl, task)
    assert list(launched(ctl)) == [third]  # the job behind the held one takes the room
    assert client.post(f"/v1/jobs/{second}/release").json()["released"] == [second]
    assert view(client, second)["phase"] == "queued"
    assert client.post(f"/v1/jobs/{second}/release").json()["released"] == []  # not held


def test_the_hold_outlives_a_controller_restart(tmp_path: Path, clock: Clock) -> None:
    ctl = one_node_controller(tmp_path, clock)
    client = TestClient(create_app(ctl), raise_server_exceptions=False)
    job = submit(client)["id"]
    assert client.post(f"/v1/jobs/{job}/hold", json={}).json()["held"] == [job]
    assert view(client, job)["reason"] == "held: held by user"
    ctl.persist.close()
    again = one_node_controller(tmp_path, clock)  # recovers the pending job, held
    try:
        client = TestClient(create_app(again), raise_server_exceptions=False)
        assert launched(again) == {}
        assert view(client, job)["phase"] == "held"
        assert client.post(f"/v1/jobs/{job}/release").json()["released"] == [job]
        assert list(launched(again)) == [job]
    finally:
        again.persist.close()


def test_holding_an_array_holds_its_waiting_members(ctl: Controller, client: TestClient) -> None:
    made = submit(client, array={"start": 0, "stop": 2})
    parent, members = made["id"], made["ids"]
    task = launched(ctl)[members[0]]  # the first member runs, the others wait
    held = client.post(f"/v1/jobs/{parent}/hold", json={"reason": "x"}).json()["held"]
    assert held == members[1:]
    finish(ctl, task)
    assert launched(ctl) == {}
    assert client.post(f"/v1/jobs/{parent}/release").json()["released"] == members[1:]
    assert list(launched(ctl)) == [members[1]]


@pytest.mark.parametrize(
    ("which", "body", "status", "message"),
    [
        ("running", {}, 409, "is running: only a waiting job can be held (cancel it instead)"),
        ("ended", {}, 409, "has ended"),
        ("unknown", {}, 404, "no job '999'"),
        ("pending", {"reason": "x" * 1001}, 422, "reason"),
        ("pending", {"reason": "a\u0000b"}, 422, "NUL"),
        ("pending", {"why": "x"}, 422, "why"),
    ],
)
def test_bad_holds_are_refused_and_change_nothing(
    ctl: Controller,
    client: TestClient,
    which: str,
    body: dict[str, str],
    status: int,
    message: str,
) -> None:
    done, running, pending = ended_running_pending(ctl, client)
    target = {"running": running, "ended": done, "unknown": "999", "pending": pending}[which]
    answer = client.post(f"/v1/jobs/{target}/hold", json=body)
    assert answer.status_code == status, answer.text
    assert message in answer.text
    assert view(client, pending)["phase"] != "held"
    assert view(client, running)["state"] == "Running"


def test_a_job_submitted_held_waits_until_released(ctl: Controller, client: TestClient) -> None:
    made = submit(client, hold=True, array={"start": 0, "stop": 1})
    members = made["ids"]
    assert [view(client, m)["phase"] for m in members] == ["held", "held"]
    assert view(client, members[0])["reason"] == "held: submitted held"
    assert launched(ctl) == {}
    assert client.post(f"/v1/jobs/{members[1]}/release").json()["released"] == [members[1]]
    assert list(launched(ctl)) == [members[1]]


def stop(ctl: Controller, task: str) -> None:
    """The agent reports the task killed (as after a requeue's SIGTERM)."""
    report = TaskReport(task_id=task, state=TaskState.EXITED, exit_code=-15)
    ctl.heartbeat(Heartbeat(node="n0", reports=[report], running=[]), wait_s=0)
    ctl.run_cycle()


def test_a_running_job_is_requeued_and_starts_again(ctl: Controller, client: TestClient) -> None:
    job = submit(client)["id"]
    task = launched(ctl)[job]
    answer = client.post(f"/v1/jobs/{job}/requeue", json={"reason": "bad node suspected"})
    assert answer.json() == {"held": [], "released": [], "requeued": [job]}
    reply = ctl.heartbeat(Heartbeat(node="n0", running=[task]), wait_s=0)
    assert [k.task_id for k in reply.kill] == [task]
    stop(ctl, task)
    again = launched(ctl)
    assert list(again) == [job] and again[job] != task  # a new run
    shown = view(client, job)
    assert shown["state"] == "Running"
    events = ctl.persist.store.events_for_job(job)
    kinds = [e.event.kind for e in events]
    assert "JobRequeueRequested" in kinds and "JobRequeued" in kinds


def test_requeue_and_hold_keeps_it_waiting(ctl: Controller, client: TestClient) -> None:
    job = submit(client)["id"]
    task = launched(ctl)[job]
    body = {"reason": "wait for the fix", "hold": True}
    assert client.post(f"/v1/jobs/{job}/requeue", json=body).json()["requeued"] == [job]
    stop(ctl, task)
    assert launched(ctl) == {}
    shown = view(client, job)
    assert (shown["state"], shown["phase"], shown["reason"]) == (
        "Pending",
        "held",
        "held: wait for the fix",
    )
    assert client.post(f"/v1/jobs/{job}/release").json()["released"] == [job]
    assert list(launched(ctl)) == [job]


@pytest.mark.parametrize(
    ("which", "status", "message"),
    [
        ("pending", 409, "only a running job is requeued"),
        ("unknown", 404, "no job '999'"),
        ("twice", 409, "is already stopping"),
    ],
)
def test_bad_requeues_are_refused(
    ctl: Controller, client: TestClient, which: str, status: int, message: str
) -> None:
    done, running, pending = ended_running_pending(ctl, client)
    if which == "twice":
        assert client.post(f"/v1/jobs/{running}/requeue", json={}).status_code == 200
    target = {"pending": pending, "ended": done, "unknown": "999", "twice": running}[which]
    answer = client.post(f"/v1/jobs/{target}/requeue", json={})
    assert answer.status_code == status, answer.text
    assert message in answer.text


def test_a_waiting_jobs_limits_change_and_outlive_a_restart(tmp_path: Path, clock: Clock) -> None:
    ctl = one_node_controller(tmp_path, clock)
    client = TestClient(create_app(ctl), raise_server_exceptions=False)
    first = submit(client)["id"]
    launched(ctl)
    job = submit(client, walltime_s=3600, priority=1)["id"]
    ctl.run_cycle()
    body = {"walltime_s": 600, "priority": 7, "qos": "bronze"}
    assert client.post(f"/v1/jobs/{job}/update", json=body).json() == {"updated": [job]}
    stored = ctl.persist.store.get_job(job)
    assert stored is not None and stored.job.priority == 7
    assert (stored.job.request["walltime_s"], stored.job.request["qos"]) == (600, "bronze")
    kinds = [e.event.kind for e in ctl.persist.store.events_for_job(job)]
    assert "JobUpdated" in kinds
    refused = client.post(f"/v1/jobs/{first}/update", json={"priority": 3})
    assert refused.status_code == 409 and "only a waiting job can be changed" in refused.text
    assert client.post(f"/v1/jobs/{job}/update", json={}).status_code == 409  # nothing to do
    assert client.post(f"/v1/jobs/{job}/update", json={"walltime_s": 0}).status_code == 422
    ctl.persist.close()
    again = one_node_controller(tmp_path, clock)  # recovered with the new values
    try:
        assert again.jobs[job].spec.walltime_s == 600 and again.jobs[job].spec.priority == 7
    finally:
        again.persist.close()


def test_a_job_changed_before_the_core_takes_it_gets_the_change(
    ctl: Controller, client: TestClient
) -> None:
    launched(ctl)
    made = submit(client, walltime_s=900, array={"start": 0, "stop": 1})
    answer = client.post(f"/v1/jobs/{made['id']}/update", json={"walltime_s": 60})
    assert answer.json() == {"updated": made["ids"]}  # no cycle has run since the submission
    ctl.run_cycle()
    assert [ctl.core.jobs[m].spec.walltime_s for m in made["ids"]] == [60, 60]
