"""A job step's standard input (``srun``'s, api/step_schemas.py's ``stdin``) reaches the
tasks that get it as a file of their launch (controller/steps.py), for every task or one
alone, never in a task's variables; a bad one is refused (422) and a step without one is
launched as before. The route hands it to ``Controller.create_step`` as a parameter
(:class:`StepStdin`), never in a launch's variables."""

from __future__ import annotations

import base64
from typing import Any

import pytest
from fastapi.testclient import TestClient
from pydantic import ValidationError

from fusesched.agent.step_stdin import STDIN_MAX_BYTES, STDIN_MAX_TOTAL
from fusesched.agent.task_files import STDIN_FILE
from fusesched.api.step_schemas import STEP_STDIN_ENV, StepRequest
from fusesched.api.wire import Heartbeat, TaskLaunch
from fusesched.controller.service import Controller
from fusesched.controller.steps import StepStdin
from fusesched.submit.sbatch import parse_sbatch

DATA = base64.b64encode(b"line\n\x00\xff").decode()


@pytest.fixture
def job(ctl: Controller) -> str:
    """A running 4-task job on n0, its batch task handed to the node."""
    (job_id,) = ctl.submit([parse_sbatch("#!/bin/sh\nsleep 60\n", args=["-n", "4"]).request])
    ctl.run_cycle()
    (batch,) = launches(ctl)
    assert batch.task_id.startswith(job_id)
    return job_id


def launches(ctl: Controller) -> list[TaskLaunch]:
    """What n0's next beat (all of its tasks running) hands its agent."""
    return ctl.heartbeat(Heartbeat(node="n0", running=list(ctl.tasks)), wait_s=0).launch


def step(client: TestClient, job: str, count: int, **fields: Any) -> Any:
    task = {"node": "n0", "argv": ["cat"], "env": {"A": "1"}}
    body = {"slots": {"n0": count}, "tasks": [task] * count, **fields}
    return client.post(f"/v1/jobs/{job}/steps", json=body)


def test_every_task_gets_it(ctl: Controller, client: TestClient, job: str) -> None:
    created = step(client, job, 2, stdin=DATA)
    assert created.status_code == 201, created.text
    sent = launches(ctl)
    assert [launch.task_id for launch in sent] == created.json()["task_ids"]
    for launch in sent:
        assert launch.files == {STDIN_FILE: DATA}
        assert STEP_STDIN_ENV not in launch.env and DATA not in launch.env.values()
        assert launch.env["A"] == "1"


def test_one_task_alone_gets_it(ctl: Controller, client: TestClient, job: str) -> None:
    created = step(client, job, 3, stdin=DATA, stdin_task=1)
    assert created.status_code == 201, created.text
    assert [launch.files for launch in launches(ctl)] == [{}, {STDIN_FILE: DATA}, {}]


def test_without_it_the_launches_are_as_before(
    ctl: Controller, client: TestClient, job: str
) -> None:
    """A request's own variable of the carrier's name is no standard input (nor a variable:
    a step's marks are the controller's)."""
    task = {"node": "n0", "argv": ["cat"], "env": {STEP_STDIN_ENV: DATA}}
    created = client.post(f"/v1/jobs/{job}/steps", json={"slots": {"n0": 1}, "tasks": [task]})
    assert created.status_code == 201, created.text
    (launch,) = launches(ctl)
    assert launch.files == {} and STEP_STDIN_ENV not in launch.env
    assert "files" not in launch.model_dump(exclude_defaults=True)


@pytest.mark.parametrize(
    ("fields", "said"),
    [
        ({"stdin": "not base64!"}, "stdin must be base64"),
        ({"stdin": DATA, "stdin_task": 2}, "stdin_task: the step has 2 task(s)"),
        ({"stdin_task": 0}, "stdin_task needs stdin"),
        ({"stdin": ""}, "at least 1 character"),
        (
            {"stdin": DATA, "pty": {"term": "xterm", "rows": 24, "cols": 80}},
            "stdin: a step on a pseudo-terminal (pty) reads that terminal",
        ),
    ],
)
def test_a_bad_one_is_refused(
    ctl: Controller, client: TestClient, job: str, fields: dict[str, Any], said: str
) -> None:
    refused = step(client, job, 2 if "pty" not in fields else 1, **fields)
    assert refused.status_code == 422, refused.text
    assert said in refused.text
    assert launches(ctl) == []  # nothing started


def test_the_caps(ctl: Controller, client: TestClient, job: str) -> None:
    too_big = base64.b64encode(b"x" * (STDIN_MAX_BYTES + 1)).decode()
    refused = step(client, job, 1, stdin=too_big)
    assert refused.status_code == 422
    assert f"at most {STDIN_MAX_BYTES} bytes, and {STDIN_MAX_TOTAL} bytes in all" in refused.text
    whole = base64.b64encode(b"x" * STDIN_MAX_BYTES).decode()
    assert step(client, job, 2, stdin=whole, stdin_task=1).status_code == 201
    assert [len(launch.files.get(STDIN_FILE, "")) for launch in launches(ctl)] == [0, len(whole)]


def test_each_tasks_copy_counts() -> None:
    """(checked by the request's own validation, before the job is looked at)"""
    eighth = base64.b64encode(b"x" * (STDIN_MAX_TOTAL // 8 + 1)).decode()
    tasks = [{"node": "n0", "argv": ["cat"]}] * 8
    with pytest.raises(ValidationError, match=f"{STDIN_MAX_TOTAL} bytes in all"):
        StepRequest.model_validate({"slots": {"n0": 8}, "tasks": tasks, "stdin": eighth})
    one = {"slots": {"n0": 8}, "tasks": tasks, "stdin": eighth, "stdin_task": 7}
    request = StepRequest.model_validate(one)
    assert (request.stdin, request.stdin_task) == (eighth, 7)
    assert not any(STEP_STDIN_ENV in task.env for task in request.tasks)  # (never a variable)


def test_the_route_passes_it_as_a_parameter(
    ctl: Controller, client: TestClient, job: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The route hands ``stdin`` to ``Controller.create_step`` as :class:`StepStdin`; a
    request's own variable of the old carrier's name reaches neither the controller nor a
    task, and is not taken for the standard input."""
    asked: list[dict[str, Any]] = []
    create = ctl.create_step

    def spy(*args: Any, **kwargs: Any) -> tuple[int, list[str]]:
        asked.append({"launches": args[3], "stdin": kwargs.get("stdin")})
        return create(*args, **kwargs)

    monkeypatch.setattr(ctl, "create_step", spy)
    other = base64.b64encode(b"forged").decode()
    task = {"node": "n0", "argv": ["cat"], "env": {"A": "1", STEP_STDIN_ENV: other}}
    body = {"slots": {"n0": 2}, "tasks": [task] * 2, "stdin": DATA, "stdin_task": 1}
    created = client.post(f"/v1/jobs/{job}/steps", json=body)
    assert created.status_code == 201, created.text
    (call,) = asked
    assert call["stdin"] == StepStdin(DATA, 1)
    assert [dict(env) for _, _, env in call["launches"]] == [{"A": "1"}] * 2
    sent = launches(ctl)
    assert [launch.files for launch in sent] == [{}, {STDIN_FILE: DATA}]
    assert not any(STEP_STDIN_ENV in launch.env or other in launch.env.values() for launch in sent)
    without = client.post(f"/v1/jobs/{job}/steps", json={"slots": {"n0": 1}, "tasks": [task]})
    assert without.status_code == 201, without.text
    assert asked[-1]["stdin"] is None


def test_create_step_takes_it_as_a_parameter(ctl: Controller, job: str) -> None:
    """Called directly (not through the API), the controller gives the tasks the ``stdin``
    it is passed, and a launch's variable of the old carrier's name is neither standard
    input nor a variable of the task."""
    env = {"A": "1", STEP_STDIN_ENV: DATA}
    ctl.create_step(job, {"n0": 2}, False, [("n0", ["cat"], env)] * 2)
    sent = launches(ctl)
    assert [launch.files for launch in sent] == [{}, {}]
    assert not any(STEP_STDIN_ENV in launch.env for launch in sent)
    ctl.create_step(job, {"n0": 2}, True, [("n0", ["cat"], {})] * 2, stdin=StepStdin(DATA, 0))
    assert [launch.files for launch in launches(ctl)] == [{STDIN_FILE: DATA}, {}]
    ctl.create_step(job, {"n0": 1}, True, [("n0", ["cat"], {})], stdin=StepStdin(DATA))
    assert [launch.files for launch in launches(ctl)] == [{STDIN_FILE: DATA}]


def test_a_bad_parameter_is_refused(ctl: Controller, job: str) -> None:
    with pytest.raises(ValueError, match="cannot be empty"):
        StepStdin("")
    with pytest.raises(ValueError, match="at least 0"):
        StepStdin(DATA, -1)
    with pytest.raises(ValueError, match="stdin of task 2: the step has 2 task"):
        ctl.create_step(job, {"n0": 2}, False, [("n0", ["cat"], {})] * 2, stdin=StepStdin(DATA, 2))
    assert launches(ctl) == []  # nothing started
