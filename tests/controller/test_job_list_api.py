"""``GET /v1/jobs``'s list filters with authentication on: a person sees its own tenant's jobs
whatever it filters by (another tenant's ids, names, users and arrays answer nothing, as
unknown ones do), ``me=true`` is the token's user, and bad values are 400s with a reason.
``combine_arrays=true`` (squeue without ``-r``): an array's members that wait for one reason
come as one row (the newest one's view, the id ``N_[indices%throttle]``, ``array_tasks``,
``array_count``) and ``limit`` counts rows."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from tests.builders import Clock
from tests.controller.conftest import one_node_controller

from fusesched.api.app import create_app
from fusesched.controller.auth import Authenticator
from fusesched.controller.service import Controller
from fusesched.store import TokenKind

GROUP = {"resources": {"cpu": "1"}, "argv": ["true"]}


class Api:
    """alice (user of tenant t), tina (admin of t), omar (user of tenant u), root (admin)."""

    def __init__(self, ctl: Controller) -> None:
        auth = Authenticator(ctl.persist.store, enabled=True, clock=ctl.clock)
        self.client = TestClient(create_app(ctl, auth), raise_server_exceptions=False)
        self.tokens = {
            who: auth.issue(TokenKind.USER, user=who, tenant=tenant, role=role)[0]
            for who, tenant, role in (
                ("alice", "t", "user"),
                ("tina", "t", "tenant-admin"),
                ("omar", "u", "user"),
                ("root", "t", "cluster-admin"),
            )
        }

    def submit(self, who: str, **extra: Any) -> str:
        answer = self.client.post(
            "/v1/jobs", json={"groups": [GROUP], "hold": True, **extra}, headers=self._as(who)
        )
        assert answer.status_code == 201, answer.text
        return str(answer.json()["id"])

    def get(self, who: str, query: str) -> tuple[int, Any]:
        answer = self.client.get(f"/v1/jobs?{query}", headers=self._as(who))
        return answer.status_code, answer.json()

    def ids(self, who: str, query: str) -> set[str]:
        status, body = self.get(who, query)
        assert status == 200, body
        return {job["id"] for job in body}

    def _as(self, who: str) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.tokens[who]}"}


@pytest.fixture
def api(tmp_path: Path) -> Iterator[Api]:
    ctl = one_node_controller(tmp_path, Clock())
    try:
        yield Api(ctl)
    finally:
        ctl.persist.close()


def test_filters_never_reach_another_tenants_jobs(api: Api) -> None:
    mine = api.submit("alice", name="train")
    theirs = api.submit("omar", name="train")
    array = api.submit("omar", name="sweep", array={"start": 1, "stop": 2})
    for query in (
        f"id={theirs}",
        f"id={array}",
        f"id={array}_1",
        f"id={theirs}&id={array}&id={array}_2",
        "user=omar",
        "name=sweep",
        f"array={array}",
        "tenant=u",
        "me=true&user=omar",
    ):
        assert not (api.ids("alice", query) - {mine}), query
        assert not (api.ids("tina", query) - {mine}), query
    assert api.ids("alice", f"id={theirs}&id={mine}") == {mine}
    assert api.ids("alice", "name=train") == {mine}
    assert api.ids("omar", f"id={array}") == {f"{array}_1", f"{array}_2"}
    assert api.ids("root", "name=train") == {mine, theirs}
    assert api.ids("root", f"id={array}&tenant=t") == set()


def test_me_is_the_tokens_user(api: Api) -> None:
    alices = api.submit("alice")
    tinas = api.submit("tina")
    assert api.ids("alice", "me=true") == {alices}
    assert api.ids("tina", "me=true") == {tinas}
    assert api.ids("tina", "me=true&user=alice") == {alices, tinas}
    assert api.ids("root", "me=true") == set()


@pytest.mark.parametrize(
    ("query", "said"),
    [
        ("id=1;DROP", "bad job id '1;DROP'"),
        ("id=%E2%91%A0", "bad job id"),  # a digit, but not an ASCII one
        ("phase=Timeout", "unknown phase 'Timeout'"),
        ("queue=", "an empty queue"),
        ("&".join(["id=1"] * 101), "at most 100 id values"),
        ("name=" + "n" * 201, "at most 200 characters"),
        ("me=maybe", "me"),
    ],
)
def test_bad_filters_are_400s_with_a_reason(api: Api, query: str, said: str) -> None:
    status, body = api.get("alice", query)
    assert status in (400, 422) and said in str(body), (status, body)


def test_an_arrays_waiting_members_are_one_row(api: Api) -> None:
    single = api.submit("alice", name="one")
    array = api.submit(
        "alice", name="sweep", array={"start": 0, "stop": 8, "step": 2, "max_parallel": 2}
    )
    theirs = api.submit("omar", name="theirs", array={"start": 1, "stop": 3})
    status, rows = api.get("alice", "combine_arrays=true")
    assert status == 200, rows
    assert [r["id"] for r in rows] == [f"{array}_[0-8:2%2]", single]
    combined, alone = rows
    assert (combined["array_tasks"], combined["array_count"]) == ("0-8:2%2", 5)
    assert (combined["array_parent"], combined["state"], combined["name"]) == (
        array,
        "Pending",
        "sweep",
    )
    assert combined["seq"] > alone["seq"] and combined["reason"]
    assert (alone["array_tasks"], alone["array_count"]) == (None, None)
    status, first = api.get("alice", "combine_arrays=true&limit=1")
    assert [r["id"] for r in first] == [f"{array}_[0-8:2%2]"]
    status, rest = api.get("alice", f"combine_arrays=true&before={first[0]['seq']}")
    assert [r["id"] for r in rest] == [single]
    members = api.ids("alice", "limit=3")  # (without it: a row a member, as before)
    assert members == {f"{array}_8", f"{array}_6", f"{array}_4"}
    assert api.ids("root", "combine_arrays=true&name=theirs") == {f"{theirs}_[1-3]"}
