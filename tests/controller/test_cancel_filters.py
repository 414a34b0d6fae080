"""Cancelling by filter (``POST /v1/jobs/cancel``, ``fusesched cancel -u/--me/-n/-t/-p``), as
Slurm's ``scancel -u USER``, ``--me``, ``-n NAME``, ``-t STATE``, ``-p PARTITION``: every
unfinished job that matches, in one request; another user's job is reported, never cancelled
(with authentication on); a controller older than the route is served by listing and
cancelling one by one."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import select
from tests.builders import Clock
from tests.controller.conftest import one_node_controller
from tests.controller.test_actions_gaps import People
from tests.controller.test_running_limit import beat, started, submit
from typer.testing import CliRunner

from fusesched.api.app import create_app
from fusesched.cli import live
from fusesched.cli.main import app
from fusesched.controller.auth import Authenticator
from fusesched.controller.logs import LogStore
from fusesched.controller.persist import Persistence
from fusesched.controller.service import Controller
from fusesched.sdk import Client, ControllerError
from fusesched.store import TokenKind
from fusesched.store.schema import events

HALF = {"resources": {"cpu": "2"}, "argv": ["sleep", "1000"]}  # two of them fill the node
SMALL = {"resources": {"cpu": "1"}, "argv": ["sleep", "1000"]}


def cancel(client: TestClient, **body: Any) -> Any:
    return client.post("/v1/jobs/cancel", json=body)


def state(client: TestClient, job: str) -> str:
    return str(client.get(f"/v1/jobs/{job}").json()["state"])


def queue_up(client: TestClient) -> dict[str, str]:
    """Two of ``train`` (one running, one waiting behind the full node), one ``eval`` that
    runs, one ``eval`` of bob's waiting: their ids by a short name."""
    ids = {
        "train_run": submit(client, HALF, name="train", user="alice")["id"],
        "eval_run": submit(client, HALF, name="eval", user="alice")["id"],
        "train_wait": submit(client, HALF, name="train", user="alice")["id"],
        "bob_wait": submit(client, HALF, name="eval", user="bob")["id"],
    }
    return ids


# ------------------------------------------------------------------ the API


def test_only_the_unfinished_jobs_matching_every_filter_are_cancelled(
    ctl: Controller, client: TestClient
) -> None:
    ids = queue_up(client)
    assert set(started(ctl)) == {ids["train_run"], ids["eval_run"]}
    answer = cancel(client, name=["train"], state=["Pending"])
    assert answer.status_code == 200, answer.text
    assert answer.json() == {"cancelled": [ids["train_wait"]], "denied": []}
    assert cancel(client, queue=["gpu"]).json()["cancelled"] == []  # (no job in that queue)
    both = cancel(client, user=["alice", "carol"], queue=["default"], name=["eval", "train"])
    assert both.json()["cancelled"] == [ids["train_run"], ids["eval_run"]]
    ctl.run_cycle()
    assert state(client, ids["train_wait"]) == "Cancelled"
    assert state(client, ids["bob_wait"]) == "Pending"
    # being stopped (their tasks are being killed): matched no more, as scancel skips them
    assert cancel(client, user=["alice"]).json()["cancelled"] == []
    # ids and filters: the given ids that match
    assert cancel(client, id=[ids["bob_wait"]], user=["alice"]).json()["cancelled"] == []
    assert cancel(client, id=[ids["bob_wait"], "4242"], state=["Pending"]).json() == {
        "cancelled": [ids["bob_wait"]],
        "denied": [],
    }


def test_an_arrays_members_are_cancelled_in_one_request(
    ctl: Controller, client: TestClient
) -> None:
    array = submit(client, SMALL, name="sweep", array={"start": 0, "stop": 999})["id"]
    other = submit(client, SMALL, name="other")["id"]
    ctl.run_cycle()  # four members run, the others wait
    answer = cancel(client, name=["sweep"])
    assert answer.json()["cancelled"] == [f"{array}_{i}" for i in range(1000)]
    answer = cancel(client, id=[array, other], name=["sweep", "other"])
    assert answer.json()["cancelled"] == [other]  # (the members are being stopped now)
    ctl.run_cycle()
    members = client.get(f"/v1/jobs?array={array}&limit=1000").json()
    stopping = {j for j, live in ctl.jobs.items() if live.stopping is not None}
    assert len(members) == 1000 and len(stopping) == 4  # (the four that ran: being killed)
    assert {m["id"] for m in members if m["state"] != "Cancelled"} == stopping


def test_a_job_waiting_for_adoption_after_a_restart_is_running(
    tmp_path: Path, clock: Clock
) -> None:
    """A restarted controller's job left running, whose node has not reported yet (not in
    the core yet), is running as ``GET /v1/jobs`` shows it: ``-t R`` matches it, ``-t PD``
    does not. A waiting job's submission is held until the nodes are back: its cancel too,
    and it is not matched again meanwhile."""
    ctl = one_node_controller(tmp_path, clock)
    job = submit(TestClient(create_app(ctl)), SMALL, name="train")["id"]
    started(ctl)
    waits = submit(TestClient(create_app(ctl)), {**SMALL, "resources": {"cpu": "4"}})["id"]
    ctl.persist.close()
    again = Controller(
        Persistence(f"sqlite:///{tmp_path / 'db.sqlite'}"), LogStore(tmp_path / "logs"), clock=clock
    )
    try:
        client = TestClient(create_app(again))
        assert again.jobs[job].adopting and state(client, job) == "Running"
        assert again.held and state(client, waits) == "Pending"
        assert cancel(client, state=["Pending"]).json()["cancelled"] == [waits]
        assert cancel(client, state=["Pending"]).json()["cancelled"] == []  # (asked already)
        assert cancel(client, name=["train"], state=["Running"]).json()["cancelled"] == [job]
        assert again.jobs[job].cancel_asked is not None  # (carried out once adopted)
        assert cancel(client, name=["train"]).json()["cancelled"] == []  # (asked already)
    finally:
        again.persist.close()


@pytest.mark.parametrize(
    ("body", "status", "said"),
    [
        ({}, 400, "no job identification provided"),
        ({"me": False}, 400, "no job identification provided"),
        ({"me": True}, 400, "authentication is off"),
        ({"state": ["Completed"]}, 422, "Pending"),
        ({"state": []}, 422, "at least 1"),
        ({"user": []}, 422, "at least 1"),
        ({"user": [""]}, 422, "at least 1 character"),
        ({"name": "train"}, 422, "valid list"),
        ({"name": ["train"], "account": ["x"]}, 422, "Extra inputs"),
    ],
)
def test_bad_filters_are_refused_with_the_reason(
    ctl: Controller, client: TestClient, body: dict[str, Any], status: int, said: str
) -> None:
    job = submit(client, HALF, name="train")["id"]
    answer = cancel(client, **body)
    assert answer.status_code == status and said in answer.text, answer.text
    assert state(client, job) == "Pending" and ctl.jobs[job].stopping is None


def people_with_bob_and_uma(ctl: Controller) -> People:
    """:class:`People`, and ``bob`` (a user of tenant ``t``) and ``uma`` (of tenant ``u``)."""
    people = People(ctl)
    auth = Authenticator(ctl.persist.store, enabled=True, clock=ctl.clock)
    for who, tenant in (("bob", "t"), ("uma", "u")):
        people.tokens[who], _ = auth.issue(TokenKind.USER, user=who, tenant=tenant, role="user")
    return people


def test_a_user_cancels_only_their_own_jobs_by_filter(ctl: Controller) -> None:
    people = people_with_bob_and_uma(ctl)
    mine = people.submit("alice", name="train")["id"]
    bobs = people.submit("bob", name="train")["id"]
    umas = people.submit("uma", name="train")["id"]
    answer = people.post("alice", "/v1/jobs/cancel", {"name": ["train"]})
    assert answer.status_code == 200, answer.text
    # bob's is denied (scancel's "Access/permission denied"); uma's, of another tenant, unseen
    assert answer.json() == {"cancelled": [mine], "denied": [bobs]}
    assert people.post("alice", "/v1/jobs/cancel", {"user": ["bob"]}).json() == {
        "cancelled": [],
        "denied": [bobs],
    }
    assert people.post("bob", "/v1/jobs/cancel", {"me": True}).json()["cancelled"] == [bobs]
    ctl.run_cycle()
    assert people.job(mine)["state"] == people.job(bobs)["state"] == "Cancelled"
    assert people.job(umas)["state"] in ("Pending", "Running")  # (the node is free now)
    worker = people.client.post(
        "/v1/jobs/cancel", json={"name": ["train"]}, headers={"Authorization": "Bearer nope"}
    )
    assert worker.status_code == 401


def test_an_admin_cancels_others_jobs_by_filter_and_it_is_audited(ctl: Controller) -> None:
    people = people_with_bob_and_uma(ctl)
    bobs = people.submit("bob", name="train")["id"]
    umas = people.submit("uma", name="train")["id"]
    tina = people.post("tina", "/v1/jobs/cancel", {"user": ["bob", "uma"]})  # t's admin
    assert tina.json() == {"cancelled": [bobs], "denied": []}
    root = people.post("root", "/v1/jobs/cancel", {"user": ["uma"]})  # a cluster-admin
    assert root.json() == {"cancelled": [umas], "denied": []}
    with ctl.persist.store._read() as conn:
        rows = conn.execute(select(events).where(events.c.kind == "Audit")).mappings().all()
    audits = [r["data"] for r in rows if r["data"]["action"] == "cancel"]
    assert [(a["by"], a["cancelled"]) for a in audits] == [
        ("tina", [bobs]),
        ("root", [umas]),
    ]


# ------------------------------------------------------------------ the command


class Routed(Client):
    """The SDK, its requests answered by the controller's API in this process (a refusal a
    :class:`ControllerError`, as over HTTP)."""

    def __init__(self, http: TestClient, token: str = "") -> None:
        super().__init__("http://127.0.0.1:1", token=token)
        self.http = http

    def _call(self, method: str, path: str, body: Any = None, raw: bool = False) -> Any:
        headers = {"Authorization": f"Bearer {self.token}"} if self.token else {}
        answer = self.http.request(method, path, json=body, headers=headers)
        if answer.status_code >= 300:
            raise ControllerError(answer.status_code, str(answer.json().get("detail")))
        return answer.text if raw else answer.json()


def run(monkeypatch: pytest.MonkeyPatch, sdk: Client, *args: str) -> Any:
    monkeypatch.setattr(live, "_client", lambda *given: sdk)
    return CliRunner().invoke(app, ["cancel", *args])


def older(ctl: Controller, auth: Authenticator | None = None) -> TestClient:
    """The API of a controller older than ``POST /v1/jobs/cancel`` (it answers 405: only
    ``GET /v1/jobs/{job_id}`` has that path)."""
    api = create_app(ctl, auth)
    api.router.routes = [
        r for r in api.router.routes if getattr(r, "path", "") != "/v1/jobs/cancel"
    ]
    return TestClient(api, raise_server_exceptions=False)


@pytest.mark.parametrize("old", [False, True])
def test_cancel_by_filters_says_what_it_cancelled(
    ctl: Controller, client: TestClient, monkeypatch: pytest.MonkeyPatch, old: bool
) -> None:
    sdk = Routed(older(ctl) if old else client)
    array = submit(client, SMALL, name="sweep", array={"start": 0, "stop": 9})["id"]
    ids = queue_up(client)
    ctl.run_cycle()
    result = run(monkeypatch, sdk, "-n", "sweep", "-t", "PD,running")
    assert result.exit_code == 0, result.output
    assert result.stdout.strip() == f"Cancelling {array}_[0-9] (10 jobs)"
    assert ("one by one" in result.stderr) is old
    result = run(monkeypatch, sdk, ids["train_wait"], ids["bob_wait"], "-u", "bob", "--json")
    assert json.loads(result.stdout) == {"cancelled": [ids["bob_wait"]]}, result.output
    result = run(monkeypatch, sdk, "-n", "nothing", "-p", "default")
    assert (result.exit_code, result.stdout.strip()) == (0, "No matching jobs")
    result = run(monkeypatch, sdk, "-u", "alice,carol", "-u", "dave", "--partition", "default")
    assert result.stdout.strip() == (
        f"Cancelling {ids['train_run']}, {ids['eval_run']}, {ids['train_wait']} (3 jobs)"
    )
    ctl.run_cycle()
    assert {state(client, j) for j in ids.values()} == {"Cancelled"}


def test_cancel_without_ids_or_filters_or_with_a_bad_state_is_refused(
    ctl: Controller, client: TestClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    job = submit(client, HALF, name="train")["id"]
    result = run(monkeypatch, Routed(client))
    assert result.exit_code == 2 and "no job identification provided" in result.stderr
    for bad in ("CD", "PD,", "COMPLETING"):
        result = run(monkeypatch, Routed(client), "-t", bad, "-n", "train")
        assert result.exit_code == 2, result.output
        assert "PENDING/PD, RUNNING/R, SUSPENDED/S" in result.stderr or "empty" in result.stderr
    result = run(monkeypatch, Routed(client), "-t", "S", "-n", "train")  # (never suspended)
    assert (result.exit_code, result.stdout.strip()) == (0, "No matching jobs")
    result = run(monkeypatch, Routed(client), "--me")  # (no token: the local user's)
    assert (result.exit_code, result.stdout.strip()) == (0, "No matching jobs")
    # an empty id (`cancel "$JOB" -n train`, $JOB unset) is refused, not dropped: dropped, the
    # command would cancel every job of that name
    for blank in ("", " "):
        result = run(monkeypatch, Routed(client), "12", blank, "-n", "train")
        assert result.exit_code == 2 and "job id must not be empty" in result.stderr
    assert state(client, job) == "Pending"


@pytest.mark.parametrize("old", [False, True])
def test_cancel_by_filter_reports_anothers_job_as_denied(
    ctl: Controller, monkeypatch: pytest.MonkeyPatch, old: bool
) -> None:
    people = people_with_bob_and_uma(ctl)
    mine = people.submit("alice", name="train")["id"]
    bobs = people.submit("bob", name="train")["id"]
    http = people.client
    if old:
        http = older(ctl, Authenticator(ctl.persist.store, enabled=True, clock=ctl.clock))
    result = run(monkeypatch, Routed(http, people.tokens["alice"]), "-n", "train")
    assert result.exit_code == 1, result.output
    assert result.stdout.strip() == f"Cancelling {mine}"
    assert f"Kill job error on job id {bobs}: Access/permission denied" in result.stderr
    result = run(monkeypatch, Routed(http, people.tokens["bob"]), "--me")
    assert (result.exit_code, result.stdout.strip()) == (0, f"Cancelling {bobs}")


def test_signal_with_filters_reaches_the_matching_running_jobs(
    ctl: Controller, client: TestClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    ids = queue_up(client)
    tasks = started(ctl)
    result = run(monkeypatch, Routed(client), "-n", "train", "--signal", "USR1")
    assert result.exit_code == 0, result.output
    assert result.stdout.strip() == f"Sent SIGUSR1 to {ids['train_run']}"
    reply = beat(ctl, list(tasks.values()))
    assert [(s.task_id, s.signal) for s in reply.signal] == [(tasks[ids["train_run"]], "USR1")]
    result = run(monkeypatch, Routed(client), "-n", "train", "-t", "PD", "-s", "USR1")
    assert (result.exit_code, result.stdout.strip()) == (0, "No matching jobs")
    # --batch without --signal cancels, as Slurm's (its default signal is KILL): none here
    result = run(monkeypatch, Routed(client), "-n", "nothing", "--batch")
    assert (result.exit_code, result.stdout.strip()) == (0, "No matching jobs"), result.output
    assert ctl.core.jobs[ids["train_run"]].phase.value == "running"
