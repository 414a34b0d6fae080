"""Following a log by byte offsets: the log route says where its text ends in bytes
(``X-Next-Offset``): a character half written when the log is read is held back, and bytes
that are not UTF-8 come as U+FFFD (3 bytes for 1), so a reader that counted the text's bytes
skipped output after either."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

from fusesched.api.wire import Heartbeat, LogChunk
from fusesched.client_base import NEXT_OFFSET
from fusesched.controller.logs import LogStore, complete_text
from fusesched.controller.service import Controller

TEXT = "é€😀 done\n".encode()


@pytest.mark.parametrize("cut", range(len(TEXT) + 1))
def test_reading_in_two_parts_at_any_byte_gives_the_text_once(cut: int) -> None:
    first, after = complete_text(TEXT[:cut], 0)
    second, end = complete_text(TEXT[after:], after)
    assert first + second == TEXT.decode() and end == len(TEXT)
    assert "\ufffd" not in first + second


def test_bytes_that_are_not_utf8_are_shown_and_counted() -> None:
    assert complete_text(b"a\xffb\n", 10) == ("a\ufffdb\n", 14)
    assert complete_text(b"ok \xe2\x82", 0) == ("ok ", 3)  # half a euro sign: held back
    assert complete_text(b"ok \xe2\x82", 0, final=True) == ("ok \ufffd", 5)  # the log ended
    assert complete_text(b"", 7) == ("", 7)


def test_the_route_gives_the_next_offset(ctl: Controller, client: TestClient) -> None:
    answer = client.post(
        "/v1/jobs", json={"groups": [{"resources": {"cpu": "1"}, "argv": ["true"]}]}
    )
    job = answer.json()["id"]
    ctl.run_cycle()
    (launch,) = ctl.heartbeat(Heartbeat(node="n0", running=[]), wait_s=0).launch
    assert isinstance(ctl.logs, LogStore)
    raw = b"x\xff" + TEXT[:3]  # a byte that is not UTF-8, 'é', and half of '€'
    # the agent's chunk is text: write the raw bytes as the task's log file holds them
    ctl.logs.write(LogChunk(task_id=launch.task_id, offset=0, data=""))
    ctl.logs.path(launch.task_id).write_bytes(raw)
    read = client.get(f"/v1/jobs/{job}/logs")
    assert read.text == "x\ufffdé" and read.headers[NEXT_OFFSET] == "4"
    ctl.logs.path(launch.task_id).write_bytes(raw + TEXT[3:])
    rest = client.get(f"/v1/jobs/{job}/logs", params={"offset": read.headers[NEXT_OFFSET]})
    assert rest.text == TEXT[2:].decode()
    assert rest.headers[NEXT_OFFSET] == str(len(raw) + len(TEXT) - 3)
    by_task = client.get(f"/v1/jobs/{job}/logs", params={"task": launch.task_id, "offset": 4})
    assert by_task.text == TEXT[2:].decode()
    assert client.get(f"/v1/jobs/{job}/logs", params={"offset": 2**63}).status_code == 422
