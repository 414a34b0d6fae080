"""A log's end: agents mark it (an empty chunk at the log's length), and the log routes say
when a log is complete, so readers stop exactly at its end instead of waiting for quiet. A log
whose mark can never come (a task lost with its node, an agent older than marks, a job that
ended before a controller restart) reads as complete but unconfirmed (scripted heartbeats)."""

from __future__ import annotations

import os
from pathlib import Path

from fastapi.testclient import TestClient
from tests.builders import Clock
from tests.controller.conftest import one_node_controller

from fusesched.api.app import create_app
from fusesched.api.log_routes import MIN_SHARE
from fusesched.api.wire import Heartbeat, LogChunk, TaskReport, TaskState
from fusesched.client_base import LOG_COMPLETE, LOG_CONFIRMED, NEXT_OFFSET
from fusesched.controller import failures
from fusesched.controller.logs import UNCONFIRMED_AFTER_S
from fusesched.controller.service import Controller


def start(ctl: Controller, client: TestClient, replicas: int = 1) -> tuple[str, list[str]]:
    """Submit a job of ``replicas`` tasks and have ``n0`` take them: (job id, task ids)."""
    group = {"resources": {"cpu": "1"}, "argv": ["true"], "replicas": replicas}
    job = client.post("/v1/jobs", json={"groups": [group]}).json()["id"]
    ctl.run_cycle()
    launches = ctl.heartbeat(Heartbeat(node="n0", running=[]), wait_s=0).launch
    tasks = [launch.task_id for launch in launches]
    running = [
        TaskReport(task_id=t, state=TaskState.RUNNING, pid=100 + i) for i, t in enumerate(tasks)
    ]
    ctl.heartbeat(Heartbeat(node="n0", reports=running), wait_s=0)
    return job, tasks


def beat(*chunks: LogChunk, ended: tuple[str, ...] = ()) -> Heartbeat:
    reports = [TaskReport(task_id=t, state=TaskState.EXITED, exit_code=0) for t in ended]
    return Heartbeat(node="n0", logs=list(chunks), reports=reports)


def chunk(task_id: str, offset: int, data: str) -> LogChunk:
    return LogChunk(task_id=task_id, offset=offset, data=data)


def read(client: TestClient, job: str, task: str | None = None) -> tuple[str, str, str]:
    """(text, X-Log-Complete, X-Log-Confirmed) of the log from 0."""
    params = {"task": task} if task else {}
    answer = client.get(f"/v1/jobs/{job}/logs", params=params)
    assert answer.status_code == 200, answer.text
    return answer.text, answer.headers[LOG_COMPLETE], answer.headers[LOG_CONFIRMED]


def test_a_log_is_complete_once_its_agent_marks_its_end(
    ctl: Controller, client: TestClient
) -> None:
    job, (task,) = start(ctl, client)
    ctl.heartbeat(beat(chunk(task, 0, "hello ")), wait_s=0)
    assert read(client, job, task) == ("hello ", "false", "false")  # it runs
    # the exit, its last output and the mark in one beat (as an agent sends them)
    ctl.heartbeat(beat(chunk(task, 6, "wörld"), chunk(task, 12, ""), ended=(task,)), wait_s=0)
    assert read(client, job, task) == ("hello wörld", "true", "true")
    assert read(client, job) == ("hello wörld", "false", "false")  # the job has not ended yet
    ctl.run_cycle()
    assert client.get(f"/v1/jobs/{job}").json()["state"] == "Completed"
    assert read(client, job) == ("hello wörld", "true", "true")
    again = client.get(f"/v1/jobs/{job}/logs", params={"offset": 12})
    assert (again.text, again.headers[NEXT_OFFSET], again.headers[LOG_COMPLETE]) == (
        "",
        "12",
        "true",
    )


def test_a_mark_ahead_of_the_output_waits_for_it(ctl: Controller, client: TestClient) -> None:
    """A mark says the log's length: until all of it is here, the log is not complete."""
    job, (task,) = start(ctl, client)
    ctl.heartbeat(beat(chunk(task, 0, "abc"), chunk(task, 6, ""), ended=(task,)), wait_s=0)
    assert read(client, job, task) == ("abc", "false", "false")
    ctl.heartbeat(beat(chunk(task, 3, "def")), wait_s=0)
    assert read(client, job, task) == ("abcdef", "true", "true")


def test_a_task_that_wrote_nothing_has_an_empty_complete_log(
    ctl: Controller, client: TestClient
) -> None:
    job, (task,) = start(ctl, client)
    assert read(client, job, task) == ("", "false", "false")  # known: no 404 while it runs
    ctl.heartbeat(beat(chunk(task, 0, ""), ended=(task,)), wait_s=0)
    assert read(client, job, task) == ("", "true", "true")
    assert client.get(f"/v1/jobs/{job}/logs", params={"task": f"{job}.main.9"}).status_code == 404


def test_without_a_mark_the_log_is_complete_after_a_quiet_while(
    ctl: Controller, client: TestClient, clock: Clock
) -> None:
    """An agent older than marks: its task's log is taken as complete, unconfirmed, once
    nothing has been written to it for a while after the task's end."""
    job, (task,) = start(ctl, client)
    ctl.heartbeat(beat(chunk(task, 0, "old agent\n"), ended=(task,)), wait_s=0)
    ctl.run_cycle()
    assert read(client, job, task) == ("old agent\n", "false", "false")
    clock.now += UNCONFIRMED_AFTER_S
    assert read(client, job, task)[1] == "false"  # written just now
    log = ctl.logs.path(task)
    past = log.stat().st_mtime - UNCONFIRMED_AFTER_S
    os.utime(log, (past, past))
    assert read(client, job, task) == ("old agent\n", "true", "false")
    assert read(client, job) == ("old agent\n", "true", "false")


def test_a_task_lost_with_its_node_is_complete_at_once_unconfirmed(
    ctl: Controller, client: TestClient, clock: Clock
) -> None:
    job, (task,) = start(ctl, client)
    ctl.heartbeat(beat(chunk(task, 0, "half a li")), wait_s=0)
    with ctl.work:
        failures.node_lost(ctl, "n0", clock())
    assert read(client, job, task) == ("half a li", "true", "false")


def test_a_log_from_before_a_restart_reads_as_complete(tmp_path: Path, clock: Clock) -> None:
    first = one_node_controller(tmp_path, clock)
    api = TestClient(create_app(first))
    marked, (a,) = start(first, api)
    first.heartbeat(beat(chunk(a, 0, "marked\n"), chunk(a, 7, ""), ended=(a,)), wait_s=0)
    first.run_cycle()
    unmarked, (b,) = start(first, api)
    first.heartbeat(beat(chunk(b, 0, "unmarked\n"), ended=(b,)), wait_s=0)
    first.run_cycle()
    first.persist.close()

    again = one_node_controller(tmp_path, clock)  # the same store and log folder
    try:
        api = TestClient(create_app(again))
        assert read(api, marked) == ("marked\n", "true", "true")
        # its job ended and no agent can add to it any more, but none said where it ends
        assert read(api, unmarked, b) == ("unmarked\n", "true", "false")
    finally:
        again.persist.close()


def test_many_tasks_in_one_request(ctl: Controller, client: TestClient) -> None:
    job, tasks = start(ctl, client, replicas=3)
    t0, t1, t2 = tasks
    ctl.heartbeat(beat(chunk(t0, 0, "zero\n"), chunk(t1, 0, "one\n")), wait_s=0)
    ctl.heartbeat(beat(chunk(t0, 5, ""), ended=(t0,)), wait_s=0)
    answer = client.post(f"/v1/jobs/{job}/logs", json={"all": True})
    assert answer.status_code == 200, answer.text
    body = answer.json()
    assert body["job_id"] == job and body["state"] == "Running" and body["more"] is False
    got = {t["task_id"]: (t["text"], t["next_offset"], t["complete"]) for t in body["tasks"]}
    assert got == {t0: ("zero\n", 5, True), t1: ("one\n", 4, False), t2: ("", 0, False)}
    # from where each read stopped: only the new output
    ctl.heartbeat(beat(chunk(t1, 4, "uno\n"), chunk(t1, 8, ""), ended=(t1,)), wait_s=0)
    later = client.post(f"/v1/jobs/{job}/logs", json={"offsets": {t1: 4, t2: 0}}).json()
    assert [
        (t["task_id"], t["offset"], t["text"], t["complete"], t["confirmed"])
        for t in later["tasks"]
    ] == [
        (t1, 4, "uno\n", True, True),
        (t2, 0, "", False, False),
    ]


def test_many_tasks_share_max_bytes(ctl: Controller, client: TestClient) -> None:
    job, (t0, t1) = start(ctl, client, replicas=2)
    big = "x" * (MIN_SHARE + 10)
    ctl.heartbeat(beat(chunk(t0, 0, big), chunk(t0, len(big), ""), chunk(t1, 0, "y\n")), wait_s=0)
    ctl.heartbeat(beat(ended=(t0,)), wait_s=0)
    offsets = {t0: 0, t1: 0}
    first = client.post(f"/v1/jobs/{job}/logs", json={"offsets": offsets, "max_bytes": 1}).json()
    assert first["more"] is True
    (a, b) = first["tasks"]
    assert len(a["text"]) == MIN_SHARE and a["next_offset"] == MIN_SHARE and not a["complete"]
    assert b["text"] == "y\n"  # the other task's output is not held back
    offsets = {t0: a["next_offset"]}
    rest = client.post(f"/v1/jobs/{job}/logs", json={"offsets": offsets, "max_bytes": 1}).json()
    assert rest["more"] is False and rest["tasks"][0]["text"] == "x" * 10
    assert rest["tasks"][0]["complete"] is True


def test_bad_requests_for_many_tasks(ctl: Controller, client: TestClient) -> None:
    job, (task,) = start(ctl, client)
    other, _ = start(ctl, client)
    cases = {
        f"{other}.main.0": 400,  # another job's task
        "../../etc": 400,
        f"{job}.main/../0": 400,  # not a name a log can have
    }
    for name, status in cases.items():
        answer = client.post(f"/v1/jobs/{job}/logs", json={"offsets": {name: 0}})
        assert answer.status_code == status, (name, answer.text)
        assert "detail" in answer.json()
    for body in ({"offsets": {task: -1}}, {"max_bytes": 0}, {"tasks": [task]}):
        assert client.post(f"/v1/jobs/{job}/logs", json=body).status_code == 422, body
    assert client.post("/v1/jobs/999/logs", json={}).status_code == 404


def test_a_task_stopped_before_any_agent_had_it_is_complete_at_once(
    ctl: Controller, client: TestClient
) -> None:
    group = {"resources": {"cpu": "1"}, "argv": ["true"]}
    job = client.post("/v1/jobs", json={"groups": [group]}).json()["id"]
    ctl.run_cycle()  # placed: its launch waits for n0's next beat
    (task,) = ctl.tasks
    assert read(client, job, task) == ("", "false", "false")
    assert client.post(f"/v1/jobs/{job}/cancel").status_code == 202
    ctl.run_cycle()
    ctl.run_cycle()
    assert client.get(f"/v1/jobs/{job}").json()["state"] == "Cancelled"
    assert read(client, job, task) == ("", "true", "true")  # nothing to wait for
