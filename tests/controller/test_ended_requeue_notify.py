"""Notifications of an ended job requeued on request (``--mail-type``): its end forgot it,
its requeue watches it again: ``requeue`` is told (its last run's times), then its rerun's
``begin`` and end, as for any run; an array member told of as a whole rejoins a summary."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient
from tests.controller.test_dependency_kinds import exit_task, launched, view
from tests.controller.test_notify import Recorder

from fusesched.controller.notify import JobNotices
from fusesched.controller.notify_send import NotifyConfig
from fusesched.controller.notify_text import subject
from fusesched.controller.service import Controller
from fusesched.submit.job_notify import NotifyEvent

WHOLE = {"resources": {"cpu": "4"}, "argv": ["true"]}
QUARTER = {"resources": {"cpu": "1"}, "argv": ["true"]}
EVERY = ["begin", "end", "fail", "requeue"]


@pytest.fixture
def recorder(ctl: Controller) -> Iterator[Recorder]:
    got = Recorder()
    notices = JobNotices(NotifyConfig(check_s=3600), ctl.clock, sinks=[got])
    ctl.persist.notices = notices
    notices.start()
    try:
        yield got
    finally:
        notices.stop()


def submit(client: TestClient, group: dict[str, Any], **extra: Any) -> dict[str, Any]:
    notify = {"events": EVERY, "to": "a@example.org"}
    body = {"groups": [group], "user": "alice", "name": "train", "notify": notify, **extra}
    answer = client.post("/v1/jobs", json=body)
    assert answer.status_code == 201, answer.text
    return dict(answer.json())


def test_a_requeued_ended_job_is_told_of_its_requeue_and_rerun(
    ctl: Controller, client: TestClient, recorder: Recorder
) -> None:
    job = submit(client, WHOLE)["id"]
    exit_task(ctl, launched(ctl)[job], 3)
    assert [n.event for n in recorder.wait(2)] == [NotifyEvent.BEGIN, NotifyEvent.FAIL]
    first_end = recorder.notices[1].end_time
    assert client.post(f"/v1/jobs/{job}/requeue", json={"reason": "fixed"}).status_code == 200
    told = recorder.wait(3)[2]
    assert (told.event, told.state, told.end_time) == (NotifyEvent.REQUEUE, "REQUEUED", first_end)
    assert subject(told).startswith(f"fusesched Job_id={job} Name=train Requeued")
    assert "requeued (fixed)" in told.reason
    exit_task(ctl, launched(ctl)[job], 0)
    assert view(client, job)["state"] == "Completed"
    rerun = recorder.wait(5)[3:]
    assert [(n.event, n.state) for n in rerun] == [
        (NotifyEvent.BEGIN, "RUNNING"),
        (NotifyEvent.END, "COMPLETED"),
    ]


def test_a_requeued_member_of_a_summarised_array_gives_a_summary_again(
    ctl: Controller, client: TestClient, recorder: Recorder
) -> None:
    made = submit(client, QUARTER, array={"start": 0, "stop": 1})
    tasks = launched(ctl)
    for member in made["ids"]:
        exit_task(ctl, tasks[member], 0)
    assert [n.event for n in recorder.wait(2)] == [NotifyEvent.BEGIN, NotifyEvent.END]
    member = made["ids"][1]
    assert client.post(f"/v1/jobs/{member}/requeue", json={}).status_code == 200
    assert recorder.wait(3)[2].job_id == member  # (its requeue names the member)
    exit_task(ctl, launched(ctl)[member], 0)
    summary = recorder.wait(5)[-1]
    assert (summary.event, summary.job_id, summary.members) == (NotifyEvent.END, made["id"], 1)


def test_a_member_requeued_while_its_array_runs_is_counted_once(
    ctl: Controller, client: TestClient, recorder: Recorder
) -> None:
    made = submit(client, QUARTER, array={"start": 0, "stop": 2})
    tasks = launched(ctl)
    first, *others = made["ids"]
    exit_task(ctl, tasks[first], 1)
    assert client.post(f"/v1/jobs/{first}/requeue", json={}).status_code == 200
    exit_task(ctl, launched(ctl)[first], 0)
    for member in others:
        exit_task(ctl, tasks[member], 0)
    got = recorder.wait(3)
    assert [(n.event, n.job_id) for n in got[:2]] == [
        (NotifyEvent.BEGIN, made["id"]),
        (NotifyEvent.REQUEUE, first),
    ]
    assert (got[2].job_id, got[2].members) == (made["id"], 3)  # one summary, of 3 members
