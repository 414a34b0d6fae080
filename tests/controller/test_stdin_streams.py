"""The controller's streams of ``srun``'s standard input (controller/stdin_streams.py): one
writer, several readers each at its own pace, the bytes dropped once every live reader has
read them, a writer held back when they have not, readers whose tasks have ended holding
nothing back, the input's end, a writer gone, a stream made anew after a controller restart;
and their routes (api/stdin_routes.py), as ``srun`` and its tasks call them."""

from __future__ import annotations

import asyncio
import base64
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import pytest
from fastapi.testclient import TestClient
from tests.builders import Clock

from fusesched.api.wire import Heartbeat, TaskReport, TaskState
from fusesched.controller import stdin_streams
from fusesched.controller.service import Controller
from fusesched.controller.stdin_streams import (
    MAX_BUFFER,
    MAX_STREAMS_PER_JOB,
    WRITER_GONE_S,
    StdinStream,
    StdinStreams,
    StreamGap,
    TooManyStreams,
)
from fusesched.submit.sbatch import parse_sbatch

T = TypeVar("T")


def run(make: Callable[[], Awaitable[T]]) -> T:
    async def inside() -> T:
        return await make()

    return asyncio.run(inside())


def stream(clock: Clock | None = None) -> StdinStream:
    return StdinStream("7", "s", clock or Clock())


# -- one stream ------------------------------------------------------------------------------


def test_each_reader_reads_all_of_it_at_its_own_pace() -> None:
    async def go() -> None:
        s = stream()
        took = await s.write(0, b"hello ", False, 0, 0)
        assert (took.offset, took.acked, took.ended, took.readers) == (6, 0, False, False)
        s.name_readers(["7.remote.1", "7.remote.2"])
        await s.write(6, b"world", False, 0, 0)
        one = await s.read("7.remote.1", 0, 0)
        assert (one.data, one.offset, one.eof) == (b"hello world", 11, False)
        assert s.base == 0  # (the second reader has read none of it)
        two = await s.read("7.remote.2", 0, 0)
        assert two.data == b"hello world"
        await s.read("7.remote.1", 11, 0)
        await s.read("7.remote.2", 6, 0)
        assert (s.base, bytes(s.data)) == (6, b"world")  # (what both have read is dropped)
        assert (await s.write(11, b"", False, 6, 0)).acked == 6

    run(go)


def test_a_chunk_sent_again_is_taken_once() -> None:
    async def go() -> None:
        s = stream()
        await s.write(0, b"abc", False, 0, 0)
        took = await s.write(1, b"bcde", False, 0, 0)  # (its answer was lost: sent again)
        assert took.offset == 5 and bytes(s.data) == b"abcde"

    run(go)


def test_a_full_stream_holds_its_writer_back_until_a_reader_reads() -> None:
    async def go() -> None:
        s = stream()
        s.name_readers(["7.remote.1"])
        took = await s.write(0, b"x" * (MAX_BUFFER + 10), False, 0, 0)
        assert took.offset == MAX_BUFFER  # (what fits; the rest is sent again)
        waiting = asyncio.create_task(s.write(MAX_BUFFER, b"y" * 10, False, 0, 5))
        await asyncio.sleep(0.05)
        assert not waiting.done()  # (no room: it waits)
        page = await s.read("7.remote.1", 0, 0)
        await s.read("7.remote.1", page.offset, 0)  # (acknowledges the first chunk)
        took = await asyncio.wait_for(waiting, 2)
        assert took.offset == MAX_BUFFER + 10

    run(go)


def test_a_reader_whose_task_has_ended_holds_nothing_back() -> None:
    async def go() -> None:
        s = stream()
        s.name_readers(["7.remote.1", "7.remote.2"])
        await s.write(0, b"x" * MAX_BUFFER, False, 0, 0)
        await s.read("7.remote.1", MAX_BUFFER, 0)  # (one has read it all, the other none)
        asked: list[frozenset[str]] = []

        async def gone(task_ids: frozenset[str]) -> set[str]:
            asked.append(task_ids)
            return {"7.remote.2"}

        took = await s.write(MAX_BUFFER, b"more", False, 0, 5, gone)
        assert asked == [frozenset({"7.remote.1", "7.remote.2"})]
        assert took.offset == MAX_BUFFER + 4 and took.acked == MAX_BUFFER and not took.ended

        async def all_gone(task_ids: frozenset[str]) -> set[str]:
            return set(task_ids)

        s.checked = None  # (asked again at once)
        took = await s.write(MAX_BUFFER + 4, b"", False, MAX_BUFFER, 0, all_gone)
        assert took.ended  # (every reader's task has ended: srun stops forwarding)

    run(go)


def test_the_end_comes_after_the_rest_and_the_stream_is_done_once_all_read_it() -> None:
    async def go() -> None:
        s = stream()
        s.name_readers(["7.remote.1"])
        await s.write(0, b"last\n", True, 0, 0)
        page = await s.read("7.remote.1", 0, 0)
        assert (page.data, page.eof, page.lost) == (b"last\n", True, False)
        assert s.done_at is None  # (its reader has not acknowledged it yet)
        page = await s.read("7.remote.1", 5, 0)
        assert (page.data, page.eof) == (b"", True)
        assert s.done_at is not None

    run(go)


def test_a_reader_waits_for_input_and_is_woken_by_it() -> None:
    async def go() -> None:
        s = stream()
        s.name_readers(["7.remote.1"])
        await s.write(0, b"", False, 0, 0)
        reading = asyncio.create_task(s.read("7.remote.1", 0, 5))
        await asyncio.sleep(0.05)
        assert not reading.done()
        await s.write(0, b"a\n", False, 0, 0)
        page = await asyncio.wait_for(reading, 2)
        assert page.data == b"a\n" and not page.eof

    run(go)


def test_a_writer_gone_ends_the_input_said_as_lost() -> None:
    clock = Clock()

    async def go() -> None:
        s = stream(clock)
        s.name_readers(["7.remote.1"])
        await s.write(0, b"a", False, 0, 0)
        assert not (await s.read("7.remote.1", 1, 0)).eof
        clock.now += WRITER_GONE_S + 1
        page = await s.read("7.remote.1", 1, 0)
        assert (page.eof, page.lost) == (True, True)

    run(go)


def test_a_stream_made_anew_asks_its_writer_for_what_it_keeps() -> None:
    """After a controller restart: the reader comes back at offset 5, the writer, which
    keeps its input from 3 on (what the reader had not acknowledged), at 8."""

    async def go() -> None:
        s = stream()
        reading = asyncio.create_task(s.read("7.remote.1", 5, 5))
        await asyncio.sleep(0.05)
        assert not reading.done()  # (nothing yet: the writer has not said where it is)
        took = await s.write(8, b"ij", False, 3, 0)
        assert took.offset == 3 and not took.readers  # (send again from 3, and name them)
        s.name_readers(["7.remote.1"])
        took = await s.write(3, b"defghij", False, 3, 0)
        assert took.offset == 10
        page = await asyncio.wait_for(reading, 2)
        assert (page.data, page.offset) == (b"fghij", 10)

    run(go)


def test_what_a_stream_cannot_take_or_give_is_refused() -> None:
    async def go() -> None:
        s = stream()
        s.name_readers(["7.remote.1"])
        await s.write(0, b"abc", False, 0, 0)
        with pytest.raises(StreamGap, match="past the end"):
            await s.write(9, b"x", False, None, 0)
        with pytest.raises(StreamGap, match="kept offset"):
            await s.write(1, b"x", False, 2, 0)
        with pytest.raises(StreamGap, match="does not read this standard input"):
            await s.read("7.remote.9", 0, 0)
        await s.read("7.remote.1", 2, 0)
        with pytest.raises(StreamGap, match="before what the stream holds"):
            await s.read("7.remote.1", 1, 0)

    run(go)


def test_a_job_holds_a_bounded_number_of_streams_dropped_when_stale() -> None:
    clock = Clock()
    streams = StdinStreams(clock)

    async def go() -> None:
        ids = {streams.new("7") for _ in range(MAX_STREAMS_PER_JOB)}
        assert len(ids) == MAX_STREAMS_PER_JOB
        with pytest.raises(TooManyStreams, match="at most 64 at once"):
            streams.new("7")
        streams.new("8")  # (another job's own)
        clock.now += stdin_streams.STALE_S + 1
        streams.new("7")
        assert len(streams.streams) == 1

    run(go)


# -- the routes ------------------------------------------------------------------------------


@pytest.fixture
def job(ctl: Controller) -> str:
    """A running 4-task job on n0, its batch task handed to the node."""
    (job_id,) = ctl.submit([parse_sbatch("#!/bin/sh\nsleep 60\n", args=["-n", "4"]).request])
    ctl.run_cycle()
    beat(ctl)
    return job_id


def beat(ctl: Controller, *reports: TaskReport) -> None:
    ctl.heartbeat(Heartbeat(node="n0", running=list(ctl.tasks), reports=list(reports)), wait_s=0)


def steps(client: TestClient, job: str, count: int) -> list[str]:
    task = {"node": "n0", "argv": ["cat"]}
    body = {"slots": {"n0": count}, "tasks": [task] * count}
    created = client.post(f"/v1/jobs/{job}/steps", json=body)
    assert created.status_code == 201, created.text
    return list(created.json()["task_ids"])


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def test_srun_writes_and_each_task_reads(ctl: Controller, client: TestClient, job: str) -> None:
    readers = steps(client, job, 2)
    opened = client.post(f"/v1/jobs/{job}/stdin")
    assert opened.status_code == 201, opened.text
    path = f"/v1/jobs/{job}/stdin/{opened.json()['stream']}"
    chunk = {"offset": 0, "data": b64(b"a\n"), "readers": readers, "wait": 0}
    took = client.post(path, json=chunk, params={"kept": 0})
    assert took.json() == {"offset": 2, "acked": 0, "ended": False, "readers": True}
    for reader in readers:
        page = client.get(path, params={"reader": reader, "offset": 0, "wait": 0})
        assert page.json() == {"data": b64(b"a\n"), "offset": 2, "eof": False, "lost": False}
    ended = {"offset": 2, "eof": True, "wait": 0}
    assert client.post(path, json=ended, params={"kept": 0}).json()["acked"] == 0
    for reader in readers:
        page = client.get(path, params={"reader": reader, "offset": 2, "wait": 0})
        assert page.json()["eof"] is True
    assert client.post(path, json=ended, params={"kept": 2}).json()["acked"] == 2


def test_once_the_tasks_have_ended_srun_is_told(
    ctl: Controller, client: TestClient, job: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(stdin_streams, "CHECK_EVERY_S", 0.0)  # (asked at each write)
    (reader,) = steps(client, job, 1)
    path = f"/v1/jobs/{job}/stdin/{client.post(f'/v1/jobs/{job}/stdin').json()['stream']}"
    first = {"offset": 0, "data": b64(b"a"), "readers": [reader], "wait": 0}
    assert client.post(path, json=first).json()["ended"] is False
    beat(ctl)  # (the launch handed over)
    beat(ctl, TaskReport(task_id=reader, state=TaskState.EXITED, exit_code=0))
    later = {"offset": 1, "data": "", "wait": 0}
    answer = client.post(path, json=later)
    assert answer.json()["ended"] is True, answer.text


def test_what_the_routes_refuse(ctl: Controller, client: TestClient, job: str) -> None:
    assert client.post("/v1/jobs/999/stdin").status_code == 404
    elsewhere = {"offset": 0, "data": "", "wait": 0}
    assert client.post("/v1/jobs/999/stdin/s1", json=elsewhere).status_code == 404
    gone = client.get("/v1/jobs/999/stdin/s1", params={"reader": "999.remote.1", "wait": 0})
    assert gone.status_code == 404  # (no stream is made for a job that does not run)
    path = f"/v1/jobs/{job}/stdin/{client.post(f'/v1/jobs/{job}/stdin').json()['stream']}"
    bad: dict[str, Any] = {"offset": 0, "data": "!!", "wait": 0}
    assert client.post(path, json=bad).status_code == 422
    others = {"offset": 0, "data": "", "readers": ["8.remote.1"], "wait": 0}
    assert client.post(path, json=others).status_code == 422
    page = client.get(path, params={"reader": "8.remote.1", "offset": 0, "wait": 0})
    assert page.status_code == 403
    assert client.get(f"/v1/jobs/{job}/stdin/a%20b", params={"reader": "x"}).status_code == 422
    assert client.post(path, json={"offset": 0, "data": b64(b"ab"), "wait": 0}).status_code == 200
    assert client.post(path, json={"offset": 5, "data": "", "wait": 0}).status_code == 409
