"""A ``run --pty`` command that ends at once (``tty; exit 4``): its exit can end the job before
its agent posts what it wrote and before its run first asks for it (controller/pty_tasks.py,
controller/pty_relay.py). Its run, asking after that end, waits for the output and its end
(not told the job has ended); the wait is bounded (:data:`LAST_OUTPUT_S` after the exit, or
after the agent's latest post), so an agent that died with its task holds no run for long.
One that never started, or was lost with its node, is not waited for at all
(tests/controller/test_pty_restart_ended.py)."""

from __future__ import annotations

import asyncio
import base64
import threading
import time
from typing import Any

from fastapi.testclient import TestClient
from tests.builders import Clock
from tests.controller.test_pty_routes import b64, submit_pty
from tests.controller.test_running_limit import beat, started

from fusesched.api.wire import TaskReport, TaskState
from fusesched.controller.pty_relay import LAST_OUTPUT_S, PtyRelay, TaskRef
from fusesched.controller.service import Controller


def ended_at_once(ctl: Controller, client: TestClient) -> tuple[str, str]:
    """A ``run --pty`` job whose task ran and exited 4, its job ended: (job, task)."""
    job = submit_pty(client)
    task = started(ctl)[job]
    beat(ctl, [], reports=[TaskReport(task_id=task, state=TaskState.EXITED, exit_code=4)])
    ctl.run_cycle()
    assert task not in ctl.tasks and job not in ctl.jobs  # (the job has ended)
    return job, task


def page(client: TestClient, job: str, offset: int, wait: float) -> Any:
    answer = client.get(f"/v1/jobs/{job}/pty/output", params={"offset": offset, "wait": wait})
    assert answer.status_code == 200, answer.text
    return answer.json()


def test_a_run_asking_after_its_commands_end_waits_for_the_output_posted_later(
    ctl: Controller, client: TestClient
) -> None:
    """The race seen live: the job ended, then run asked (it was told "job 1 has ended" and
    printed nothing), then the agent posted ``/dev/pts/N``."""
    job, task = ended_at_once(ctl, client)
    assert page(client, job, 0, 0) == {"data": "", "offset": 0, "closed": False}
    answers: list[Any] = []
    poll = threading.Thread(target=lambda: answers.append(page(client, job, 0, 20)))
    poll.start()
    time.sleep(0.3)
    assert poll.is_alive()  # (a long poll: run waits for the agent)
    agent = f"/v1/agents/n0/pty/{task}/output"
    body = {"offset": 0, "data": b64(b"/dev/pts/3\r\n"), "wait": 0}
    assert client.post(agent, json=body, params={"kept": 0}).json()["offset"] == 12
    poll.join(10)
    (shown,) = answers
    assert (base64.b64decode(shown["data"]), shown["closed"]) == (b"/dev/pts/3\r\n", False)
    end = {"offset": 12, "data": "", "eof": True, "wait": 0}
    assert client.post(agent, json=end, params={"kept": 12}).is_success
    assert page(client, job, 12, 20) == {"data": "", "offset": 12, "closed": True}


def test_an_ended_tasks_output_is_not_waited_for_past_its_bound(
    ctl: Controller, client: TestClient, clock: Clock
) -> None:
    """Its agent never posts (it died with the task): run's poll is answered closed once
    :data:`LAST_OUTPUT_S` have passed since the exit, not at the end of its long poll."""
    job, _ = ended_at_once(ctl, client)
    clock.now += LAST_OUTPUT_S - 0.3
    began = time.monotonic()
    assert page(client, job, 0, 20) == {"data": "", "offset": 0, "closed": True}
    assert time.monotonic() - began < 5
    session = ctl.pty_relay.of_job(job)
    assert session is not None and session.done_at is not None  # (dropped in a while)


def test_a_job_ended_long_ago_is_answered_closed_at_once(
    ctl: Controller, client: TestClient, clock: Clock
) -> None:
    job, _ = ended_at_once(ctl, client)
    clock.now += 3600
    assert page(client, job, 0, 0) == {"data": "", "offset": 0, "closed": True}


def test_a_live_tasks_output_is_waited_for_as_before(ctl: Controller, client: TestClient) -> None:
    job = submit_pty(client)
    started(ctl)
    assert page(client, job, 0, 0.2) == {"data": "", "offset": 0, "closed": False}


def test_each_post_of_the_agent_waits_as_long_again_for_its_next() -> None:
    """A task that wrote much just before its exit: its agent posts the rest as its run
    reads it, maybe past the bound since the exit; a read finding the relay empty between
    two posts is not taken for the end."""

    async def scenario() -> None:
        relay = PtyRelay()
        ended = TaskRef("1", "1.main.0", "n0", ended_s=0.0)
        session = relay.open(ended, 100.0)
        assert session.output_by == 100.0 + LAST_OUTPUT_S
        await session.put_output(0, b"a" * 10, False, 0.0, 100.0 + LAST_OUTPUT_S - 1)
        assert (await session.read_output(0, 0.0, 100.0 + LAST_OUTPUT_S + 1)).data == b"a" * 10
        empty = await session.read_output(10, 0.0, 100.0 + LAST_OUTPUT_S + 2)
        assert (empty.data, empty.closed) == (b"", False)  # (its next post is on its way)
        late = await session.read_output(10, 0.0, 100.0 + 2 * LAST_OUTPUT_S)
        assert late.closed  # (nothing since: the agent is gone)
        running = relay.open(TaskRef("2", "2.main.0", "n0"), 100.0)
        assert running.output_by is None

    asyncio.run(scenario())
