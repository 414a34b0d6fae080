"""The holder's side of InactiveLimit under trouble (cli/keepalive.py): the keepalive pings on
through a standby's 503 and a server error and gives up only on a refusal for good; only a
controller's refusal of the unknown field ``attended`` is taken as an older controller, and
``fusesched run`` against a controller older than both ``submit_dir`` and ``attended`` warns
once for each and sends the job three times at most; ``--inactive-limit`` refuses what it
cannot take. Real HTTP servers on loopback and real processes."""

from __future__ import annotations

import contextlib
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from tests.cli.old_controller import serving

from fusesched.cli.keepalive import OLDER_CONTROLLER, Attended, Keepalive, final
from fusesched.sdk import Client, ControllerError

PYTHON = [sys.executable, "-m", "fusesched"]
FAST = {"job_id": "5", "inactive_limit_s": 1, "ping_every_s": 0.2}
#: What the scripted controller answers to the pings, in turn (status, body).
SCRIPT = [
    (200, FAST),
    (503, {"detail": "standby"}),  # a single URL in front of a leader and its standby
    (500, {"detail": "Internal Server Error"}),
    (429, {"detail": "too many requests"}),
    (200, FAST),
    (409, {"detail": "job 5 has ended"}),
]


@contextlib.contextmanager
def scripted(answers: list[tuple[int, Any]]) -> Iterator[tuple[str, list[str]]]:
    """A controller on loopback answering the pings with ``answers`` in turn (then 404): its
    URL and the paths it was asked."""
    asked: list[str] = []
    left = list(answers)

    def route(path: str) -> tuple[int, Any] | None:
        asked.append(path)
        return left.pop(0) if left else None

    with serving(lambda body: [], route) as (url, _):
        yield url, asked


def test_the_keepalive_pings_on_through_server_errors_and_stops_on_a_refusal() -> None:
    with scripted(SCRIPT) as (url, asked):
        pinging = Keepalive(Client(url, token="t"), "5").start()
        assert pinging.ended(timeout=10)
    assert asked == ["/v1/jobs/5/alive"] * len(SCRIPT)  # (none after the refusal)
    assert pinging.pings == 2 and pinging.refused == "job 5 has ended"


@pytest.mark.parametrize("status", [400, 401, 403, 404, 409, 422])
def test_a_refusal_ends_the_pings(status: int) -> None:
    assert final(status)


@pytest.mark.parametrize("status", [0, 408, 429, 500, 502, 503])
def test_an_error_that_may_pass_does_not(status: int) -> None:
    assert not final(status)


def test_only_a_refusal_of_the_unknown_field_is_an_older_controller() -> None:
    sent: list[Any] = []

    def refusing(message: str) -> Any:
        def call(payload: Any) -> Any:
            sent.append(payload)
            raise ControllerError(422, message)

        return call

    other = "invalid request: Value error, a job array cannot be held (attended: true) ..."
    with pytest.raises(ControllerError, match="cannot be held"):
        Attended(refusing(other), pytest.fail)({"name": "x"})
    assert sent == [{"name": "x", "attended": True}]  # (not sent again without it)
    warned: list[str] = []
    older = Attended(
        refusing("invalid request: attended: Extra inputs are not permitted"), warned.append
    )
    with pytest.raises(ControllerError):
        older({"name": "y"})
    assert sent[-1] == {"name": "y"} and older.older and warned == [OLDER_CONTROLLER]


def _old(body: Any) -> list[dict[str, Any]]:
    """A controller older than ``submit_dir`` and ``attended``: FastAPI's 422 for each."""
    return [
        {"type": "extra_forbidden", "loc": ["body", key], "msg": "Extra inputs are not permitted"}
        for key in ("submit_dir", "attended")
        if key in body
    ]


def test_run_warns_once_per_field_to_a_controller_older_than_both(tmp_path: Path) -> None:
    with serving(_old) as (url, received):
        env = {"PATH": "/usr/bin:/bin", "FUSESCHED_CONTROLLER": url, "LANG": "C.UTF-8"}
        env["XDG_CONFIG_HOME"] = str(tmp_path / "config")
        done = subprocess.run(
            [*PYTHON, "run", "-Q", "true"],
            capture_output=True,
            text=True,
            cwd=tmp_path,
            env=env,
            timeout=60,
        )
    assert "Traceback" not in done.stderr, done.stderr
    assert done.stderr.count("the controller is older than this command") == 2, done.stderr
    fields = [sorted(k for k in body if k in ("submit_dir", "attended")) for body in received]
    assert fields == [["attended", "submit_dir"], ["submit_dir"], []]  # the last one taken


@pytest.mark.parametrize(
    ("value", "said"),
    [
        ("-1", "greater than or equal to 0"),
        ("abc", "valid integer"),
        ("1e99", "valid integer"),
        ("65534", "less than or equal to 65533"),
        ("9" * 400, "less than or equal to 65533"),  # (no float overflow later)
    ],
)
def test_the_inactive_limit_refuses_what_it_cannot_take(value: str, said: str) -> None:
    for command in ("controller", "up"):
        done = subprocess.run(
            [*PYTHON, command, "--inactive-limit", value],
            capture_output=True,
            text=True,
            timeout=60,
            env={"PATH": "/usr/bin:/bin", "COLUMNS": "400", "LANG": "C.UTF-8"},
        )
        assert done.returncode == 2, done.stderr
        assert "--inactive-limit" in done.stderr and said in done.stderr, done.stderr
        assert "Traceback" not in done.stderr


def test_the_controllers_help_shows_the_limits_default_and_range() -> None:
    done = subprocess.run(
        [*PYTHON, "controller", "--help"],
        capture_output=True,
        text=True,
        timeout=60,
        env={"PATH": "/usr/bin:/bin", "COLUMNS": "400", "LANG": "C.UTF-8"},
    )
    assert done.returncode == 0, done.stderr
    said = " ".join(done.stdout.replace("│", " ").split())
    start = said.index("--inactive-limit")
    option = said[start : said.index("[default:", start) + len("[default: 300]")]
    assert option.startswith("--inactive-limit SECONDS [0<=x<=65533]"), option
    assert "[default: 300]" in option and "InactiveLimit" in option, option
