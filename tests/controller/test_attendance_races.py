"""InactiveLimit at the edges (controller/attendance.py): a job requeued or preempted while its
holder is alive stays held (its holder's ping is taken while its run ends and it goes back to
the queue), and one whose holder went silent is not let go but cancelled once it is queued
again; an ended job's holder is no longer watched; an array cannot be attended; the alive
route's bad input gets a 4xx with a reason. The agents' side is played by hand, the limit's
clock is passed in."""

from __future__ import annotations

from typing import Any

import pytest
from fastapi.testclient import TestClient
from pydantic import ValidationError
from tests.builders import Clock
from tests.controller.test_attendance import silent_for
from tests.controller.test_no_requeue import make, start  # noqa: F401 (make: a fixture)
from tests.controller.test_running_limit import beat, started, submit

from fusesched.api.app import create_app
from fusesched.api.wire import Heartbeat, TaskReport, TaskState
from fusesched.controller import attendance
from fusesched.controller.inactive import DEFAULT_INACTIVE_LIMIT_S as LIMIT
from fusesched.controller.inactive import MAX_PING_S, ping_every
from fusesched.controller.service import Controller
from fusesched.model.phases import JobPhase
from fusesched.submit.request import JobRequest
from fusesched.submit.sbatch import parse_sbatch

ONE = {"resources": {"cpu": "1"}, "argv": ["true"]}


def test_a_ping_while_a_requeued_job_goes_back_to_the_queue_is_taken(
    ctl: Controller, client: TestClient
) -> None:
    """(A requeue on request is refused for an attended job, as no batch job: a failure
    its restart policy retries requeues it.)"""
    retried = {"retry_application_failures": True, "backoff_s": 0}
    job = submit(client, attended=True, restart=retried)["id"]
    task = started(ctl)[job]
    exited = TaskReport(task_id=task, state=TaskState.EXITED, exit_code=1)
    beat(ctl, [], reports=[exited])  # its run has ended; the core has not requeued it yet
    assert ctl.jobs[job].requeue is not None
    answer = client.post(f"/v1/jobs/{job}/alive")  # (its salloc/run must not give up on it)
    assert answer.status_code == 200, answer.text
    ctl.run_cycle()
    assert ctl.core.jobs[job].phase is not JobPhase.CANCELLED
    assert client.post(f"/v1/jobs/{job}/alive").status_code == 200
    assert ctl.jobs[job].request.attended  # (the same job, still attended)


def _submit(ctl: Controller, *options: str, attended: bool = False) -> str:
    """``sleep`` on 4 CPUs of queue ``train`` as sbatch would, with ``options``: its id."""
    args = ["-c", "4", "-p", "train", "-A", "ml", *options]
    request = parse_sbatch("#!/bin/sh\nsleep 600\n", args=args).request
    (job_id,) = ctl.submit([request.model_copy(update={"attended": attended})])
    return job_id


def test_a_preempted_jobs_holder_keeps_it_and_a_silent_ones_job_is_cancelled_once_queued(
    make: Any,  # noqa: F811
    clock: Clock,
) -> None:
    ctl = make("n0", tenancy=True)
    client = TestClient(create_app(ctl))
    low = _submit(ctl, "--qos=low", attended=True)
    (task,) = start(ctl, "n0")
    clock.now += 10  # (a job is not preempted in the cycle that started it)
    _submit(ctl, "--qos=high")
    ctl.run_cycle()  # the preemption: a kill for low's task
    assert [k.task_id for k in ctl.heartbeat(Heartbeat(node="n0", running=[task]), 0).kill] == [
        task
    ]
    exited = TaskReport(task_id=task, state=TaskState.EXITED, exit_code=143)
    ctl.heartbeat(Heartbeat(node="n0", reports=[exited], running=[]), wait_s=0)
    assert ctl.jobs[low].exit_sent  # its run ended; the core has not requeued it yet
    assert client.post(f"/v1/jobs/{low}/alive").status_code == 200  # (its holder stays)
    assert attendance.check(ctl, silent_for(LIMIT + 10)) == []  # silent, but it comes back
    assert ctl.holders.knows(low)  # (still watched)
    ctl.run_cycle()
    assert ctl.core.jobs[low].phase is JobPhase.QUEUED  # requeued, still attended
    assert attendance.check(ctl, silent_for(LIMIT + 20)) == [low]
    ctl.run_cycle()
    assert ctl.core.jobs[low].phase is JobPhase.CANCELLED
    assert ctl.core.jobs[low].history[-1].reason.startswith("InactiveLimit: ")


def test_an_ended_jobs_holder_is_no_longer_watched(ctl: Controller, client: TestClient) -> None:
    job = submit(client, ONE, attended=True, hold=True)["id"]
    ctl.run_cycle()
    assert ctl.holders.knows(job)
    assert client.post(f"/v1/jobs/{job}/cancel").status_code == 202
    ctl.run_cycle()
    assert job not in ctl.jobs and not ctl.holders.knows(job)
    assert len(ctl.holders) == 0


def test_an_array_cannot_be_attended(client: TestClient) -> None:
    body = {"groups": [ONE], "attended": True, "array": {"start": 0, "stop": 3}}
    refused = client.post("/v1/jobs", json=body)
    assert 400 <= refused.status_code < 500, refused.text
    assert "a job array cannot be held by a waiting command" in refused.text
    with pytest.raises(ValidationError, match="each job is kept by pings for its own id"):
        JobRequest.model_validate(body)
    assert JobRequest.model_validate({**body, "attended": False}).array is not None


def test_the_alive_routes_bad_input_gets_a_4xx_with_a_reason(
    ctl: Controller, client: TestClient
) -> None:
    job = submit(client, ONE, attended=True, hold=True)["id"]
    with_body = client.post(f"/v1/jobs/{job}/alive", json={"anything": [1, 2]})
    assert with_body.status_code == 200, with_body.text  # (a body is ignored)
    raw = client.post(f"/v1/jobs/{job}/alive", content=b"\xff not json")
    assert raw.status_code == 200, raw.text
    huge = "9" * 5000
    unknown = client.post(f"/v1/jobs/{huge}/alive")
    assert unknown.status_code == 404 and "no job" in unknown.text
    nul = client.post("/v1/jobs/1%00/alive")
    assert nul.status_code == 422 and "NUL" in nul.text, nul.text
    assert client.get(f"/v1/jobs/{job}/alive").status_code == 405


def test_ten_thousand_holders_ping_at_most_a_few_hundred_times_a_second() -> None:
    assert ping_every(LIMIT) == MAX_PING_S == 30.0  # ten chances within the default limit
    assert 10_000 / ping_every(LIMIT) < 400
    assert ping_every(2) == pytest.approx(0.4)  # (short limits: five times within them)
