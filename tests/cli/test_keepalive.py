"""The holder's side of InactiveLimit (cli/keepalive.py): salloc's and run's submissions are
attended, and a controller older than the field (a small HTTP server on loopback that answers
as FastAPI does for a field it does not know) gets them again without it, with a warning; the
pace of the pings stays within bounds whatever the answer says."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from tests.cli.old_controller import serving

from fusesched.cli.keepalive import OLDER_CONTROLLER, Attended, _pause
from fusesched.controller.inactive import MAX_PING_S, MIN_PING_S
from fusesched.sdk import Client, ControllerError

JOB = {"name": "sh", "groups": [{"resources": {"cpu": 1}, "argv": ["true"]}]}
#: The fields the controllers here know.
KNOWN = frozenset({*JOB, "user"})


def _refusal(knows: frozenset[str]) -> Any:
    def refused(body: dict[str, Any]) -> list[dict[str, Any]]:
        return [
            {"type": "extra_forbidden", "loc": ["body", key], "msg": "Extra inputs"}
            for key in body
            if key not in knows
        ]

    return refused


@pytest.fixture
def controller(request: pytest.FixtureRequest) -> Iterator[tuple[Client, list[Any]]]:
    """A controller that knows ``attended`` (``param`` True) or is older (False): a client
    of it, and the bodies it received."""
    knows = KNOWN | {"attended"} if request.param else KNOWN
    with serving(_refusal(knows)) as (url, received):
        yield Client(url, token="t"), received


@pytest.mark.parametrize("controller", [True], indirect=True)
def test_the_job_is_submitted_attended(controller: tuple[Client, list[Any]]) -> None:
    client, received = controller
    warnings: list[str] = []
    assert Attended(client.submit, warnings.append)(JOB) == "5"
    assert [body.get("attended") for body in received] == [True]
    assert warnings == [] and "attended" not in JOB  # (the caller's payload is left as it was)


@pytest.mark.parametrize("controller", [False], indirect=True)
def test_an_older_controller_gets_it_again_without_the_field(
    controller: tuple[Client, list[Any]],
) -> None:
    client, received = controller
    warnings: list[str] = []
    assert Attended(client.submit, warnings.append)(JOB) == "5"
    assert [body.get("attended") for body in received] == [True, None]
    assert warnings == [OLDER_CONTROLLER]


@pytest.mark.parametrize("controller", [True], indirect=True)
def test_other_refusals_are_the_callers(controller: tuple[Client, list[Any]]) -> None:
    client, received = controller
    with pytest.raises(ControllerError, match="frobnicate"):
        Attended(client.submit, pytest.fail)({**JOB, "frobnicate": 1})
    assert len(received) == 1  # (not sent again)


@pytest.mark.parametrize(
    ("asked", "pause"),
    [(0.4, 0.4), (0.01, MIN_PING_S), (60, MAX_PING_S), (None, MAX_PING_S), ("2", MAX_PING_S)],
)
def test_the_pace_stays_within_bounds(asked: object, pause: float) -> None:
    assert _pause(asked) == pause
    assert _pause(float("nan")) == MAX_PING_S and _pause(True) == MAX_PING_S
