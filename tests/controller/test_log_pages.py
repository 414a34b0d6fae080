"""A log read is capped: ``GET /v1/jobs/{id}/logs`` returns at most ``max_bytes`` (4 MiB by
default) from its offset, says ``X-Log-More: true`` when it stops short of what is written,
and is complete only on the page that reaches the end. Paging by ``X-Next-Offset`` gives the
whole log back, byte for byte, wherever the pages cut a character."""

from __future__ import annotations

from itertools import pairwise
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from httpx import Headers
from tests.controller.test_log_ends import beat, chunk, start

from fusesched.api.log_routes import DEFAULT_BYTES, MAX_BYTES, MIN_READ
from fusesched.client_base import LOG_COMPLETE, LOG_CONFIRMED, LOG_MORE, NEXT_OFFSET
from fusesched.controller.logs import LogStore
from fusesched.controller.service import Controller

LINE = "é€😀 line of a chatty task\n".encode()


def pages(
    client: TestClient, job: str, task: str | None, max_bytes: int | None = None
) -> list[tuple[str, Headers]]:
    """Every page of the log from 0, following ``X-Next-Offset`` while ``X-Log-More``."""
    out: list[tuple[str, Headers]] = []
    offset = 0
    while True:
        params = {"offset": str(offset)} | ({"task": task} if task else {})
        if max_bytes is not None:
            params["max_bytes"] = str(max_bytes)
        answer = client.get(f"/v1/jobs/{job}/logs", params=params)
        assert answer.status_code == 200, answer.text
        out.append((answer.text, answer.headers))  # (its names in any case)
        offset = int(answer.headers[NEXT_OFFSET])
        if answer.headers[LOG_MORE] != "true":
            return out
        assert len(out) < 100, "the pages do not get on"


def ended_job(ctl: Controller, client: TestClient, data: bytes) -> tuple[str, str]:
    """A completed job whose one task wrote ``data`` (its end marked by its agent)."""
    job, (task,) = start(ctl, client)
    assert isinstance(ctl.logs, LogStore)
    ctl.logs.write(chunk(task, 0, ""))
    ctl.logs.path(task).write_bytes(data)  # (as the agent's chunks leave it, in one go)
    ctl.heartbeat(beat(chunk(task, len(data), ""), ended=(task,)), wait_s=0)
    ctl.run_cycle()
    assert client.get(f"/v1/jobs/{job}").json()["state"] == "Completed"
    return job, task


@pytest.mark.parametrize("by_task", [True, False], ids=["task", "job"])
def test_a_log_over_the_cap_comes_in_pages_byte_exact(
    ctl: Controller, client: TestClient, by_task: bool
) -> None:
    data = b"x" * 29 + LINE * (DEFAULT_BYTES // len(LINE) + 1000)  # past 4 MiB
    with pytest.raises(UnicodeDecodeError):  # (the cap cuts a character)
        data[:DEFAULT_BYTES].decode()
    job, task = ended_job(ctl, client, data)
    got = pages(client, job, task if by_task else None)
    assert len(got) == 2
    (first, head), (rest, tail) = got
    assert DEFAULT_BYTES - 4 < int(head[NEXT_OFFSET]) < DEFAULT_BYTES
    assert len(first.encode()) == int(head[NEXT_OFFSET])
    # a page that stops short is not the end, though the job has ended
    assert (head[LOG_MORE], head[LOG_COMPLETE], head[LOG_CONFIRMED]) == ("true", "false", "false")
    assert (tail[LOG_MORE], tail[LOG_COMPLETE], tail[LOG_CONFIRMED]) == ("false", "true", "true")
    assert (first + rest).encode() == data
    assert int(tail[NEXT_OFFSET]) == len(data)


def test_max_bytes_pages_at_any_size(ctl: Controller, client: TestClient) -> None:
    data = LINE * 3 + b"\xff not UTF-8\n"
    job, task = ended_job(ctl, client, data)
    whole = data.decode(errors="replace")
    for size in range(1, len(data) + 2):
        got = pages(client, job, task, max_bytes=size)
        assert "".join(text for text, _ in got) == whole, size
        assert all(text for text, _ in got)  # (a page below a character gets one whole)
        ends = [0, *(int(h[NEXT_OFFSET]) for _, h in got)]
        assert all(0 < b - a <= max(size, MIN_READ) for a, b in pairwise(ends))
        assert ends[-1] == len(data)
        assert got[-1][1][LOG_COMPLETE] == "true"
        assert all(h[LOG_COMPLETE] == "false" for _, h in got[:-1])


def test_bad_max_bytes_is_refused(ctl: Controller, client: TestClient) -> None:
    job, task = ended_job(ctl, client, b"x")
    for bad in ("0", "-1", str(MAX_BYTES + 1), "lots"):
        answer = client.get(f"/v1/jobs/{job}/logs", params={"task": task, "max_bytes": bad})
        assert answer.status_code == 422, answer.text
        assert "max_bytes" in answer.text


def test_the_job_log_pages_across_its_runs(tmp_path: Path) -> None:
    """A requeued job's log is its runs' logs one after another: a page may end in one run's
    log, at its end, or in the next, and the pages still make the whole."""
    store = LogStore(tmp_path)
    runs = {"7.main.0": "run one é\n".encode(), "7-r1.main.0": "run two 😀 €\n".encode()}
    for task_id, data in runs.items():
        store.write(chunk(task_id, 0, ""))
        store.path(task_id).write_bytes(data)
    whole = b"".join(runs.values())
    parts = list(runs)
    for limit in range(MIN_READ, len(whole) + 2):
        texts, offset, at_end = [], 0, False
        while not at_end:
            text, offset, at_end = store.read_parts(parts, offset, True, limit)
            assert text and len(text.encode()) <= limit
            texts.append(text)
        assert "".join(texts).encode() == whole and offset == len(whole), limit
    assert store.read_parts(parts, 0, True) == (whole.decode(), len(whole), True)
    assert store.read_parts(parts, len(whole), True, 4) == ("", len(whole), True)
