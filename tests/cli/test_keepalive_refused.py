"""The keepalive (cli/keepalive.py) says once, on stderr, why it stopped when the controller
refuses its pings for good for another reason than the job's end — a revoked token's 403, a
job it cannot see — and stays silent on the job's end (409). Real HTTP servers on loopback."""

from __future__ import annotations

import pytest
from tests.cli.test_keepalive_retry import FAST, scripted

from fusesched.cli.keepalive import Keepalive, given_up
from fusesched.sdk import Client


@pytest.mark.parametrize(
    ("status", "why"), [(403, "token revoked"), (401, "no token"), (404, "no job '5'")]
)
def test_a_refusal_is_said_once(status: int, why: str, capsys: pytest.CaptureFixture[str]) -> None:
    with scripted([(200, FAST), (status, {"detail": why})]) as (url, asked):
        pinging = Keepalive(Client(url, token="t"), "5").start()  # (says it with warn)
        assert pinging.ended(timeout=10)
    assert len(asked) == 2 and pinging.refused == why
    said = " ".join(capsys.readouterr().err.split())
    assert said == "warning: " + given_up("5", status, why)
    assert f"job 5 (HTTP {status}: {why}); it is no longer told" in said


def test_the_jobs_end_is_not_said() -> None:
    said: list[str] = []
    with scripted([(409, {"detail": "job 5 has ended"})]) as (url, _):
        pinging = Keepalive(Client(url, token="t"), "5", say=said.append).start()
        assert pinging.ended(timeout=10)
    assert pinging.refused == "job 5 has ended" and said == []
