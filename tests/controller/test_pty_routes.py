"""The relay's routes (api/pty_routes.py) with the agent played by hand: keystrokes reach the
node's agent and the terminal's output the client; only the job's owner (or an admin) may
attach, only the task's node may relay it; bad input is a 4xx with its reason; an agent too
old for terminals gets no such launch (it fails to start, saying why); a terminal job's
holder has a short InactiveLimit of its own."""

from __future__ import annotations

import base64
import time
from typing import Any

import pytest
from fastapi.testclient import TestClient
from tests.controller.test_actions_gaps import People
from tests.controller.test_running_limit import beat, started

from fusesched.api.wire import Heartbeat, TaskReport, TaskState
from fusesched.controller import attendance
from fusesched.controller.inactive import PTY_LIMIT_S
from fusesched.controller.service import Controller
from fusesched.store import TokenKind

SHELL = {"resources": {"cpu": "1"}, "argv": ["bash", "-i"]}
PTY = {"term": "xterm-256color", "rows": 33, "cols": 101}


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def submit_pty(client: TestClient, **extra: Any) -> str:
    answer = client.post("/v1/jobs", json={"groups": [SHELL], "pty": PTY, **extra})
    assert answer.status_code == 201, answer.text
    return str(answer.json()["id"])


def test_keystrokes_reach_the_agent_and_the_output_the_client(
    ctl: Controller, client: TestClient
) -> None:
    job = submit_pty(client, attended=True)
    ctl.run_cycle()
    (launch,) = beat(ctl, []).launch
    assert launch.pty is not None and launch.pty.rows == 33 and launch.pty.term == PTY["term"]
    task = launch.task_id
    body = {"offset": 0, "data": b64(b"echo hi\r"), "rows": 40, "cols": 120, "wait": 0}
    typed = client.post(f"/v1/jobs/{job}/pty/input", json=body)
    assert typed.json() == {"offset": 8, "acked": 0}, typed.text
    got = client.get(f"/v1/agents/n0/pty/{task}/input", params={"offset": 0, "wait": 0}).json()
    assert base64.b64decode(got["data"]) == b"echo hi\r"
    assert (got["rows"], got["cols"], got["ended"]) == (40, 120, False)
    body = {"offset": 0, "data": b64(b"hi\r\n"), "eof": True, "wait": 0}
    posted = client.post(f"/v1/agents/n0/pty/{task}/output", json=body)
    assert posted.json() == {"offset": 4, "acked": 0}, posted.text
    page = client.get(f"/v1/jobs/{job}/pty/output", params={"offset": 0, "wait": 0}).json()
    assert (base64.b64decode(page["data"]), page["offset"], page["closed"]) == (
        b"hi\r\n",
        4,
        True,
    )


def test_a_long_poll_waits_on_the_event_loop_not_in_a_thread(
    ctl: Controller, client: TestClient
) -> None:
    """Many waiting terminals at once must not take the pool's threads: a long poll that
    waits still leaves the API answering."""
    import threading

    job = submit_pty(client)
    started(ctl)
    waiters = [
        threading.Thread(
            target=client.get, args=(f"/v1/jobs/{job}/pty/output",), kwargs={"params": {"wait": 2}}
        )
        for _ in range(50)
    ]
    for waiter in waiters:
        waiter.start()
    time.sleep(0.3)
    began = time.monotonic()
    assert client.get("/healthz").status_code == 200
    assert time.monotonic() - began < 1.5
    for waiter in waiters:
        waiter.join()


@pytest.mark.parametrize(
    ("path", "body", "status", "reason"),
    [
        ("/v1/jobs/99/pty/input", {"offset": 0}, 404, "no job '99'"),
        ("/v1/jobs/{plain}/pty/input", {"offset": 0}, 409, "has no pseudo-terminal"),
        ("/v1/jobs/{job}/pty/input", {"offset": 0, "data": "!!"}, 422, "not base64"),
        ("/v1/jobs/{job}/pty/input", {"offset": 0, "data": "QQ==" * 30000}, 413, "at most"),
        ("/v1/jobs/{job}/pty/input", {"offset": 0, "rows": 3}, 422, "give both or neither"),
        ("/v1/jobs/{job}/pty/input", {"offset": 7, "wait": 0}, 409, "past the end"),
        ("/v1/agents/n1/pty/{task}/output", {"offset": 0}, 404, "no live task"),
        ("/v1/agents/n0/pty/{plain_task}/output", {"offset": 0}, 409, "no pseudo-terminal"),
    ],
)
def test_bad_calls_are_refused_with_their_reason(
    ctl: Controller, client: TestClient, path: str, body: dict[str, Any], status: int, reason: str
) -> None:
    job = submit_pty(client)
    plain = client.post("/v1/jobs", json={"groups": [SHELL]}).json()["id"]
    tasks = started(ctl)
    where = path.format(job=job, plain=plain, task=tasks[job], plain_task=tasks[plain])
    answer = client.post(where, json=body)
    assert answer.status_code == status, answer.text
    assert reason in answer.json()["detail"]


def test_a_job_not_started_yet_is_a_409(client: TestClient) -> None:
    waiting = submit_pty(client, hold=True)
    answer = client.get(f"/v1/jobs/{waiting}/pty/output", params={"wait": 0})
    assert answer.status_code == 409 and "has not started yet" in answer.text


def test_a_terminal_job_has_one_task_and_is_no_array(client: TestClient) -> None:
    two = client.post("/v1/jobs", json={"groups": [{**SHELL, "replicas": 2}], "pty": PTY})
    assert two.status_code in (400, 422) and "exactly one task" in two.text
    array = client.post(
        "/v1/jobs", json={"groups": [SHELL], "pty": PTY, "array": {"start": 0, "stop": 1}}
    )
    assert array.status_code in (400, 422) and "not an array" in array.text
    bad = client.post("/v1/jobs", json={"groups": [SHELL], "pty": {"term": "x y"}})
    assert bad.status_code in (400, 422)


def test_only_the_owner_or_an_admin_attaches_and_only_the_node_relays(ctl: Controller) -> None:
    people = People(ctl)
    job = people.post("alice", "/v1/jobs", {"groups": [SHELL], "pty": PTY}).json()["id"]
    task = started(ctl)[job]
    path = f"/v1/jobs/{job}/pty/input"
    assert people.post("alice", path, {"offset": 0, "wait": 0}).status_code == 200
    assert people.post("tina", path, {"offset": 0, "wait": 0}).status_code == 200
    auth = people.client.app.state.auth
    bob, _ = auth.issue(TokenKind.USER, user="bob", tenant="t", role="user")
    refused = people.client.post(
        path, json={"offset": 0}, headers={"Authorization": f"Bearer {bob}"}
    )
    assert refused.status_code == 403 and "only they or an admin" in refused.text
    node = auth.issue_agent("n0")
    refused = people.client.post(
        path, json={"offset": 0}, headers={"Authorization": f"Bearer {node}"}
    )
    assert refused.status_code == 403  # (a node's credential is no person's)
    other = auth.issue_agent("n9")
    answer = people.client.get(
        f"/v1/agents/n0/pty/{task}/input",
        params={"wait": 0},
        headers={"Authorization": f"Bearer {other}"},
    )
    assert answer.status_code == 403 and "not node 'n0'" in answer.text
    own = auth.issue_agent("n0")
    answer = people.client.get(
        f"/v1/agents/n0/pty/{task}/input",
        params={"wait": 0},
        headers={"Authorization": f"Bearer {own}"},
    )
    assert answer.status_code == 200, answer.text


def test_an_agent_too_old_for_terminals_fails_the_task_saying_why(
    ctl: Controller, client: TestClient
) -> None:
    job = submit_pty(client)
    ctl.run_cycle()
    reply = ctl.heartbeat(Heartbeat(node="n0", running=[]), wait_s=0, pty=False)
    assert reply.launch == []
    ctl.run_cycle()
    view = client.get(f"/v1/jobs/{job}").json()
    assert view["state"] == "Failed" and "too old for a pseudo-terminal" in view["reason"], view


def test_a_terminal_jobs_holder_has_a_short_limit(ctl: Controller, client: TestClient) -> None:
    job = submit_pty(client, attended=True)
    task = started(ctl)[job]
    alive = client.post(f"/v1/jobs/{job}/alive").json()
    assert alive["inactive_limit_s"] == PTY_LIMIT_S and alive["ping_every_s"] == PTY_LIMIT_S / 5
    assert attendance.check(ctl, time.monotonic() + PTY_LIMIT_S - 2) == []
    assert attendance.check(ctl, time.monotonic() + PTY_LIMIT_S + 6) == [job]
    (kill,) = beat(ctl, [task]).kill
    assert kill.task_id == task and kill.reason.startswith("InactiveLimit")
    assert f"(a terminal job's limit is {PTY_LIMIT_S:g} s)" in kill.reason


def test_a_terminal_job_runs_once_it_is_never_requeued_or_restarted(
    ctl: Controller, client: TestClient
) -> None:
    """A new run would have a new terminal nobody is attached to (run --pty has left the
    first one's closed end), and run would wait for it forever: as Slurm's srun --pty job, it
    is not requeued (a preemption cancels it, a node failure fails it) nor restarted, whatever
    its request says."""
    plain = submit_pty(client, attended=True)
    asked = submit_pty(client, requeue=True, restart={"max_restarts": 2})  # (as run sends)
    assert set(started(ctl)) == {plain, asked}
    for job in (plain, asked):
        requeued = client.post(f"/v1/jobs/{job}/requeue", json={})
        refused = "is not a batch job (a run --pty job)"  # (and requeue: false besides)
        assert requeued.status_code == 409 and refused in requeued.text, requeued.text


def test_a_command_that_ends_at_once_still_shows_its_output(
    ctl: Controller, client: TestClient
) -> None:
    """Its exit can end the job before its agent posts the last output and before run asks
    for it: the output is taken from the recently finished task and waits in the relay."""
    job = submit_pty(client)
    task = started(ctl)[job]
    done = TaskReport(task_id=task, state=TaskState.EXITED, exit_code=4)
    beat(ctl, [], reports=[done])
    ctl.run_cycle()
    assert task not in ctl.tasks and job not in ctl.jobs  # the job has ended
    body = {"offset": 0, "data": b64(b"/dev/pts/3\r\n"), "eof": True, "wait": 0}
    posted = client.post(f"/v1/agents/n0/pty/{task}/output", json=body)
    assert posted.json() == {"offset": 12, "acked": 0}, posted.text
    page = client.get(f"/v1/jobs/{job}/pty/output", params={"offset": 0, "wait": 0}).json()
    assert base64.b64decode(page["data"]) == b"/dev/pts/3\r\n" and page["closed"] is True
    other = client.post(f"/v1/agents/n1/pty/{task}/output", json=body)
    assert other.status_code in (403, 404), other.text
