"""``srun``'s standard input streamed to its step's tasks end to end, in one process: srun's
forwarder (agent/stdin_forward.py) writing what it reads from a pipe into the controller's
stream (the real API), and each task's reader (fusesched/stdin_pump.py) feeding a pipe of
its own with it: everything arrives, in order, at each task's pace, and the end with it; a
forwarder whose tasks have all ended stops though its input is still open; and, against a
scripted controller, one that has restarted is sent again what the tasks had not read."""

from __future__ import annotations

import contextlib
import json
import os
import ssl
import threading
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import httpx
import pytest
from fastapi.testclient import TestClient

from fusesched import stdin_pump
from fusesched.agent import stdin_forward
from fusesched.agent.stdin_forward import Forwarder, open_stream
from fusesched.api.app import create_app
from fusesched.api.wire import Heartbeat, TaskReport, TaskState
from fusesched.controller import stdin_streams
from fusesched.controller.service import Controller
from fusesched.submit.sbatch import parse_sbatch


@pytest.fixture
def api(ctl: Controller) -> Iterator[TestClient]:
    """The controller's API on one event loop, which every thread's requests share."""
    with TestClient(create_app(ctl)) as client:
        yield client


@pytest.fixture
def job(ctl: Controller) -> str:
    (job_id,) = ctl.submit([parse_sbatch("#!/bin/sh\nsleep 60\n", args=["-n", "4"]).request])
    ctl.run_cycle()
    beat(ctl)
    return job_id


def beat(ctl: Controller, *reports: TaskReport) -> None:
    ctl.heartbeat(Heartbeat(node="n0", running=list(ctl.tasks), reports=list(reports)), wait_s=0)


def step_tasks(api: TestClient, job: str, count: int) -> list[str]:
    body = {"slots": {"n0": count}, "tasks": [{"node": "n0", "argv": ["cat"]}] * count}
    created = api.post(f"/v1/jobs/{job}/steps", json=body)
    assert created.status_code == 201, created.text
    return list(created.json()["task_ids"])


def connect_to(api: TestClient) -> Callable[[], httpx.Client]:
    """srun's forwarder's client: the in-process API, left open when it is done."""
    return lambda: contextlib.nullcontext(api)  # type: ignore[return-value]


def through(api: TestClient) -> stdin_pump.Get:
    """The reader's reads of the stream, through the in-process API."""

    def get(url: str, headers: Mapping[str, str], context: ssl.SSLContext | None) -> Any:
        response = api.get(url, headers=dict(headers))
        if response.status_code >= 500:
            raise OSError(response.status_code)
        if response.status_code >= 400:
            raise stdin_pump.Refused(response.text)
        return response.json()

    return get


def task_reads(
    api: TestClient, job: str, stream: str, task: str
) -> tuple[threading.Thread, list[Any]]:
    """A task's reader feeding a pipe, and the task reading it to its end (slowly): the
    thread, and what it read (then its reader's exit status)."""
    read, write = os.pipe()
    env = {"FUSESCHED_JOB_ID": job, "FUSESCHED_TASK_ID": task, "FUSESCHED_CONTROLLER": "http://x"}
    got: list[Any] = []
    feeding = threading.Thread(
        target=lambda: got.append(stdin_pump.feed(stream, write, env, through(api)))
    )
    feeding.start()

    def consume() -> None:
        with os.fdopen(read, "rb") as pipe:
            got.insert(0, pipe.read())
        feeding.join(30)

    reading = threading.Thread(target=consume)
    reading.start()
    return reading, got


def srun_writes(data: bytes, close: bool = True) -> tuple[int, int]:
    """srun's standard input: a pipe ``data`` is written to (then closed, with ``close``)
    from a thread; (its read end, its write end: -1 once closed)."""
    read, write = os.pipe()

    def writing() -> None:
        view = memoryview(data)
        while view:
            view = view[os.write(write, view[:65536]) :]
        if close:
            os.close(write)

    threading.Thread(target=writing, daemon=True).start()
    return read, -1 if close else write


def test_every_task_reads_all_of_it_and_its_end(
    api: TestClient, job: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(stdin_forward, "KEEPALIVE_S", 0.2)  # (its end acknowledged: done)
    readers = step_tasks(api, job, 2)
    stream = open_stream(api, job)
    data = os.urandom(3 * 1024 * 1024 + 7)  # (more than the stream and srun hold at once)
    fd, _ = srun_writes(data)
    warned: list[str] = []
    forwarder = Forwarder(connect_to(api), job, stream, fd, b"head:", warned.append)
    tasks = [task_reads(api, job, stream, task) for task in readers]
    forwarder.start(readers)
    for reading, got in tasks:
        reading.join(60)
        assert got == [b"head:" + data, 0]
    assert forwarder.done.wait(30) and warned == []
    os.close(fd)


def test_tasks_that_have_ended_stop_srun_forwarding(
    api: TestClient, ctl: Controller, job: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(stdin_streams, "CHECK_EVERY_S", 0.0)
    monkeypatch.setattr(stdin_forward, "KEEPALIVE_S", 0.1)
    (reader,) = step_tasks(api, job, 1)
    stream = open_stream(api, job)
    fd, write = srun_writes(b"a\n", close=False)  # (never closed, as Snakemake's pipe)
    forwarder = Forwarder(connect_to(api), job, stream, fd, b"", print)
    forwarder.start([reader])
    assert not forwarder.done.wait(0.5)
    beat(ctl)
    beat(ctl, TaskReport(task_id=reader, state=TaskState.EXITED, exit_code=0))
    assert forwarder.done.wait(10)
    os.close(write)
    os.close(fd)


def test_a_restarted_controller_is_sent_again_what_the_tasks_had_not_read(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(stdin_forward, "KEEPALIVE_S", 0.05)
    bodies: list[tuple[int, dict[str, Any]]] = []
    answers = iter(
        [
            {"offset": 3, "acked": 1, "ended": False, "readers": True},  # (abc taken, a read)
            # restarted: a new stream starts at what srun keeps (1), and asks for its readers
            {"offset": 1, "acked": 1, "ended": False, "readers": False},
            {"offset": 3, "acked": 1, "ended": False, "readers": True},
            {"offset": 3, "acked": 3, "ended": False, "readers": True},
        ]
    )

    def controller(request: httpx.Request) -> httpx.Response:
        bodies.append((int(request.url.params["kept"]), json.loads(request.content)))
        return httpx.Response(200, json=next(answers))

    def connect() -> httpx.Client:
        return httpx.Client(base_url="http://c", transport=httpx.MockTransport(controller))

    fd, write = os.pipe()
    os.close(write)  # (srun's input has ended: it read abc of it)
    forwarder = Forwarder(connect, "7", "s", fd, b"abc", print)
    forwarder.start(["7.remote.1"])
    assert forwarder.done.wait(10)
    sent = [(kept, b["offset"], b["data"], b["eof"], "readers" in b) for kept, b in bodies]
    assert sent == [
        (0, 0, "YWJj", True, True),  # abc, the end, and the readers
        (1, 3, "", True, False),
        (1, 1, "YmM=", True, True),  # bc again, from what srun kept
        (1, 3, "", True, False),
    ]
    os.close(fd)
