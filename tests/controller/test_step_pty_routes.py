"""A job step on a pseudo-terminal (``srun --pty`` in an allocation, ``run --jobid --pty``)
with the agent played by hand: its one task's launch carries the terminal, its keystrokes and
output travel by task (``/v1/tasks/{id}/pty/...``), apart from a ``run --pty`` job's own; the
job's own credential, its owner and an admin may attach to it, nobody else (403), and a
step of several tasks on one terminal is refused with its reason."""

from __future__ import annotations

import base64
from typing import Any

from fastapi.testclient import TestClient
from tests.controller.test_actions_gaps import People
from tests.controller.test_running_limit import started

from fusesched.api.wire import Heartbeat
from fusesched.backends.federation_config import parse_federation
from fusesched.backends.routing import RouteError, route
from fusesched.controller.service import Controller
from fusesched.store import TokenKind
from fusesched.submit.request import parse_request

SHELL = {"resources": {"cpu": "1"}, "argv": ["sleep", "100"]}
PTY = {"term": "xterm", "rows": 30, "cols": 90}


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def step_body(pty: dict[str, Any] | None = PTY, tasks: int = 1) -> dict[str, Any]:
    body: dict[str, Any] = {
        "slots": {"n0": tasks},
        "overlap": True,
        "tasks": [{"node": "n0", "argv": ["bash", "-i"]}] * tasks,
    }
    return body | ({"pty": pty} if pty is not None else {})


def pty_step(client: TestClient, job: str, **headers: str) -> str:
    made = client.post(f"/v1/jobs/{job}/steps", json=step_body(), headers=headers)
    assert made.status_code == 201, made.text
    (task,) = made.json()["task_ids"]
    return str(task)


def test_a_steps_terminal_is_relayed_by_its_task(ctl: Controller, client: TestClient) -> None:
    job = client.post("/v1/jobs", json={"groups": [SHELL]}).json()["id"]
    main = started(ctl)[job]
    task = pty_step(client, job)
    beat = Heartbeat(node="n0", running=[main])
    (launch,) = ctl.heartbeat(beat, wait_s=0, pty=True).launch
    assert launch.task_id == task and launch.pty is not None and launch.pty.cols == 90
    body = {"offset": 0, "data": b64(b"hostname\r"), "wait": 0}
    assert client.post(f"/v1/tasks/{task}/pty/input", json=body).json() == {
        "offset": 9,
        "acked": 0,
    }
    got = client.get(f"/v1/agents/n0/pty/{task}/input", params={"wait": 0}).json()
    assert base64.b64decode(got["data"]) == b"hostname\r"
    posted = {"offset": 0, "data": b64(b"n0\r\n"), "eof": True, "wait": 0}
    assert client.post(f"/v1/agents/n0/pty/{task}/output", json=posted).json() == {
        "offset": 4,
        "acked": 0,
    }
    page = client.get(f"/v1/tasks/{task}/pty/output", params={"wait": 0}).json()
    assert base64.b64decode(page["data"]) == b"n0\r\n" and page["closed"]
    # (the job itself has no terminal: its route does not reach the step's)
    answer = client.get(f"/v1/jobs/{job}/pty/output", params={"wait": 0})
    assert answer.status_code == 409 and "has no pseudo-terminal" in answer.text


def test_a_run_pty_jobs_own_terminal_and_its_steps_are_apart(
    ctl: Controller, client: TestClient
) -> None:
    job = client.post("/v1/jobs", json={"groups": [SHELL], "pty": PTY}).json()["id"]
    own = started(ctl)[job]
    task = pty_step(client, job)
    for where, wanted in ((own, b"job's"), (task, b"step's")):
        body = {"offset": 0, "data": b64(wanted), "eof": False, "wait": 0}
        client.post(f"/v1/agents/n0/pty/{where}/output", json=body)
    page = client.get(f"/v1/jobs/{job}/pty/output", params={"wait": 0}).json()
    assert base64.b64decode(page["data"]) == b"job's"
    page = client.get(f"/v1/tasks/{task}/pty/output", params={"wait": 0}).json()
    assert base64.b64decode(page["data"]) == b"step's"
    answer = client.get(f"/v1/tasks/{own}/pty/output", params={"wait": 0})
    assert answer.status_code == 409 and "attach to job" in answer.text


def test_bad_step_terminals_are_refused_with_their_reason(
    ctl: Controller, client: TestClient
) -> None:
    job = client.post("/v1/jobs", json={"groups": [SHELL]}).json()["id"]
    started(ctl)
    two = client.post(f"/v1/jobs/{job}/steps", json=step_body(tasks=2))
    assert two.status_code == 422 and "runs one task, not 2" in two.text
    plain = client.post(f"/v1/jobs/{job}/steps", json=step_body(pty=None)).json()["task_ids"][0]
    answer = client.get(f"/v1/tasks/{plain}/pty/output", params={"wait": 0})
    assert answer.status_code == 409 and "srun without --pty" in answer.text
    answer = client.get(f"/v1/tasks/{job}.remote.99/pty/output", params={"wait": 0})
    assert answer.status_code == 404 and "no live task" in answer.text


def test_the_jobs_credential_its_owner_and_an_admin_attach_nobody_else(ctl: Controller) -> None:
    people = People(ctl)
    job = people.submit("alice")["id"]
    started(ctl)
    auth = people.client.app.state.auth
    own = {"Authorization": f"Bearer {auth.issue_job(job, 'alice', 't')}"}
    task = pty_step(people.client, job, **own)  # (srun --pty in the job's batch script)
    path = f"/v1/tasks/{task}/pty/output"
    for who in ("alice", "root"):
        headers = {"Authorization": f"Bearer {people.tokens[who]}"}
        answer = people.client.get(path, params={"wait": 0}, headers=headers)
        assert answer.status_code == 200, (who, answer.text)
    assert people.client.get(path, params={"wait": 0}, headers=own).status_code == 200
    bob, _ = auth.issue(TokenKind.USER, user="bob", tenant="t", role="user")
    other_job = people.submit("alice")["id"]
    strangers = {
        "bob": bob,
        "tina": people.tokens["tina"],  # (an admin of the tenant: no one's steps but her own)
        "another job's credential": auth.issue_job(other_job, "alice", "t"),
    }
    for who, token in strangers.items():
        headers = {"Authorization": f"Bearer {token}"}
        answer = people.client.get(path, params={"wait": 0}, headers=headers)
        assert answer.status_code == 403 and "may attach" in answer.text, (who, answer.text)
        made = people.client.post(f"/v1/jobs/{job}/steps", json=step_body(), headers=headers)
        assert made.status_code == 403, (who, made.text)


def test_a_terminal_job_is_not_routed_to_external_pools() -> None:
    config = parse_federation(
        {
            "pools": [{"name": "slurm", "kind": "slurm"}],
            "rules": [
                {"name": "only", "match": {"queues": ["ext"]}, "pools": ["slurm"]},
                {"name": "both", "match": {"queues": ["any"]}, "pools": ["slurm", "local"]},
            ],
        },
        "fed.yaml",
    )
    both = parse_request({"groups": [SHELL], "pty": PTY, "queue": "any"})
    result = route(config, both, {})
    assert result.pools == ("local",)
    assert any("relayed only by local pools' agents" in line for line in result.explanation)
    only = parse_request({"groups": [SHELL], "pty": PTY, "queue": "ext"})
    try:
        route(config, only, {})
    except RouteError as exc:
        assert "pool slurm: a pseudo-terminal (run --pty)" in str(exc)
    else:
        raise AssertionError("routed to an external pool")


def test_a_terminal_step_gets_its_own_cpus_and_memory(ctl: Controller, client: TestClient) -> None:
    """``srun --pty -c 2 --mem=256M bash`` in a job of 3 CPUs: its task's launch carries
    the terminal and the CPU ids and memory limit of any step's (controller/step_cpus.py)."""
    shell = {"resources": {"cpu": "3", "memory": "1Gi"}, "argv": ["sleep", "100"]}
    job = client.post("/v1/jobs", json={"groups": [shell]}).json()["id"]
    main = started(ctl)[job]
    body = step_body() | {"overlap": False, "cpus_per_task": 2, "memory": {"n0": 2**28}}
    made = client.post(f"/v1/jobs/{job}/steps", json=body)
    assert made.status_code == 201, made.text
    (launch,) = ctl.heartbeat(Heartbeat(node="n0", running=[main]), wait_s=0, pty=True).launch
    assert launch.pty is not None and len(launch.cpu_ids) == 2 and launch.memory_bytes == 2**28
