"""``POST /v1/admin/purge`` (api/purge_routes.py, controller/retention.py): a controller removes
the records of the jobs that ended before a cutoff — rows, tasks, events, log folders — and
keeps the jobs it still holds; a cutoff in the future, not a number, or negative is a 4xx with
the reason; one inside fair share's window is refused unless forced; only cluster-admins may
purge, and it is audited; a long purge answers ``more`` and goes on from ``after``; the SDK
goes on by itself. And the automatic retention (``--purge-after``): about once an hour, never
into fair share's window, in a thread of its own."""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from fastapi.testclient import TestClient
from tests.builders import Clock, one_queue_tenancy
from tests.controller.conftest import ONE_NODE
from tests.controller.test_running_limit import beat
from tests.store.conftest import pg_server, url  # noqa: F401 (fixtures: SQLite, PostgreSQL)
from tests.store.rows import job

from fusesched.api import purge_routes
from fusesched.api.access import AUDIT
from fusesched.api.app import create_app
from fusesched.api.wire import LogChunk, NodeInventory, TaskReport, TaskState
from fusesched.controller import retention
from fusesched.controller.auth import Authenticator
from fusesched.controller.logs import LogStore
from fusesched.controller.persist import Persistence
from fusesched.controller.reconfigure import read_tenancy_file
from fusesched.controller.records import ControllerConfig
from fusesched.controller.retention import PURGED, Retention
from fusesched.controller.server import ControllerServer
from fusesched.controller.service import Controller
from fusesched.policies.registry import CoreConfig
from fusesched.sdk import Client, ControllerError
from fusesched.store import JobState, TokenKind
from fusesched.store.schema import events

DAY = 86400.0
H = 3600.0


def controller(
    tmp_path: Path,
    clock: Clock,
    half_life_s: float | None = None,
    auth: bool = False,
    db: str | None = None,
) -> tuple[Controller, TestClient]:
    """A controller with node n0 (with tenancy of ``half_life_s``: fair share) and its API."""
    tenancy = None
    if half_life_s is not None:
        path = tmp_path / "tenancy.yaml"
        body = one_queue_tenancy({"cpu": 8}, scheduling={"half_life_s": half_life_s})
        path.write_text(yaml.safe_dump(body))
        tenancy = read_tenancy_file(path)
    persist = Persistence(db or f"sqlite:///{tmp_path / 'db.sqlite'}")
    ctl = Controller(
        persist,
        LogStore(tmp_path / "logs"),
        ControllerConfig(core=CoreConfig(placement="best-fit", tenancy=tenancy)),
        clock=clock,
    )
    ctl.register(NodeInventory.model_validate(ONE_NODE))
    checker = Authenticator(persist.store, enabled=auth)
    return ctl, TestClient(create_app(ctl, checker), raise_server_exceptions=False)


@pytest.fixture
def clock() -> Clock:
    found = Clock()
    found.now = 100 * DAY
    return found


@pytest.fixture
def setup(tmp_path: Path, clock: Clock) -> Iterator[tuple[Controller, TestClient]]:
    ctl, client = controller(tmp_path, clock)
    yield ctl, client
    ctl.persist.close()


@pytest.fixture
def on_both(
    tmp_path: Path,
    clock: Clock,
    url: str,  # noqa: F811 (the store tests' fixture: SQLite and PostgreSQL)
) -> Iterator[tuple[Controller, TestClient]]:
    ctl, client = controller(tmp_path, clock, db=url)
    yield ctl, client
    ctl.persist.close()


def run_job(ctl: Controller, client: TestClient, output: str = "hello\n", **extra: Any) -> str:
    """Submit a job and play its agent: it runs, writes ``output`` and ends (exit 0)."""
    body = {"groups": [{"resources": {"cpu": "1"}, "argv": ["true"]}], **extra}
    if ctl.core.tenants is not None:  # (one_queue_tenancy's)
        body.update(tenant="ml", queue="train")
    answer = client.post("/v1/jobs", json=body)
    assert answer.status_code == 201, answer.text
    job_id = str(answer.json()["id"])
    ctl.run_cycle()
    (launch,) = beat(ctl, []).launch
    task = launch.task_id
    beat(ctl, [task], reports=[TaskReport(task_id=task, state=TaskState.RUNNING, pid=7)])
    chunks = [LogChunk(task_id=task, offset=0, data=output)]
    chunks.append(LogChunk(task_id=task, offset=len(output.encode()), data=""))
    ended = TaskReport(task_id=task, state=TaskState.EXITED, exit_code=0)
    beat(ctl, [], reports=[ended], logs=chunks)
    ctl.run_cycle()
    assert client.get(f"/v1/jobs/{job_id}").json()["state"] == "Completed"
    return job_id


def purge(client: TestClient, ended_before: float, **body: Any) -> Any:
    return client.post("/v1/admin/purge", json={"ended_before": ended_before, **body})


def test_the_records_of_long_ended_jobs_go(
    on_both: tuple[Controller, TestClient], clock: Clock
) -> None:
    ctl, client = on_both
    old = run_job(ctl, client, output="old output\n")
    clock.now += 10 * DAY
    recent = run_job(ctl, client)
    waiting = client.post(
        "/v1/jobs", json={"groups": [{"resources": {"cpu": "1"}, "argv": ["true"]}], "hold": True}
    ).json()["id"]
    ctl.run_cycle()
    logs = ctl.logs.root
    assert (logs / old).is_dir() and (logs / recent).is_dir()
    cutoff = clock.now - DAY

    dry = purge(client, cutoff, dry_run=True)

    assert dry.status_code == 200, dry.text
    found = dry.json()
    assert found["dry_run"] is True and found["jobs"] == 1 and found["tasks"] == 1
    assert found["events"] >= 2 and found["files"] == 2  # its log and its end mark
    assert found["bytes"] == len("old output\n") + len("11\n")
    assert found["more"] is False and found["after"] is None
    assert client.get(f"/v1/jobs/{old}").status_code == 200 and (logs / old).is_dir()

    done = purge(client, cutoff).json()

    assert {k: done[k] for k in ("jobs", "tasks", "files", "bytes")} == {
        k: found[k] for k in ("jobs", "tasks", "files", "bytes")
    }
    assert done["dry_run"] is False and done["events"] == found["events"]
    assert client.get(f"/v1/jobs/{old}").status_code == 404
    assert client.get(f"/v1/jobs/{old}/logs").status_code == 404
    assert not (logs / old).exists() and (logs / recent).is_dir()
    for kept in (recent, waiting):
        assert client.get(f"/v1/jobs/{kept}").status_code == 200
    # what went is written down (with no job: a purge never removes it)
    (record,) = [e for e in _events(ctl) if e["kind"] == PURGED]
    assert record["data"]["jobs"] == 1 and record["data"]["source"] == "api"
    assert record["job_id"] is None
    assert purge(client, cutoff).json()["jobs"] == 0
    # the controller goes on: a new job runs and ends
    assert client.get(f"/v1/jobs/{run_job(ctl, client)}").status_code == 200


def _events(ctl: Controller) -> list[dict[str, Any]]:
    with ctl.persist.store._read() as conn:
        return [dict(r) for r in conn.execute(events.select()).mappings()]


def test_the_jobs_the_controller_still_holds_stay(
    setup: tuple[Controller, TestClient], clock: Clock
) -> None:
    ctl, client = setup
    store = ctl.persist.store
    ended = {"state": JobState.COMPLETED, "phase": "completed", "end_time": 100.0}
    store.add_jobs([job(900, **ended), job(901, **ended)])
    ctl.outliving["900.main.0"] = None  # type: ignore[assignment]  # (its key is what counts)
    found = purge(client, clock.now).json()
    assert found["jobs"] == 1 and found["kept"] == 1
    assert store.get_job("900") is not None and store.get_job("901") is None


@pytest.mark.parametrize(
    ("body", "status", "reason"),
    [
        ({"ended_before": 200 * DAY}, 400, "is in the future"),
        ({"ended_before": -1}, 422, "greater than or equal to 0"),
        ({"ended_before": "soon"}, 422, "valid number"),
        ({}, 422, "Field required"),
        ({"ended_before": 1.0, "dry_run": "perhaps"}, 422, "valid boolean"),
        ({"ended_before": 1.0, "older": True}, 422, "Extra inputs are not permitted"),
        ({"ended_before": 1.0, "after": {"end_time": 1.0}}, 422, "Field required"),
    ],
)
def test_bad_input_is_a_4xx_with_the_reason(
    setup: tuple[Controller, TestClient], body: dict[str, Any], status: int, reason: str
) -> None:
    _, client = setup
    answer = client.post("/v1/admin/purge", json=body)
    assert answer.status_code == status, answer.text
    assert reason in answer.text


@pytest.mark.parametrize("value", ["NaN", "Infinity", "-Infinity"])
def test_a_cutoff_that_is_no_number_is_refused(
    setup: tuple[Controller, TestClient], value: str
) -> None:
    _, client = setup
    answer = client.post(
        "/v1/admin/purge",
        content=f'{{"ended_before": {value}}}',
        headers={"content-type": "application/json"},
    )
    assert answer.status_code == 422, answer.text
    assert "finite number" in answer.text


def test_a_cutoff_inside_fair_shares_window_needs_force(tmp_path: Path, clock: Clock) -> None:
    ctl, client = controller(tmp_path, clock, half_life_s=H)  # the window: 20 hours
    try:
        ran = run_job(ctl, client)
        clock.now += 10 * H
        refused = purge(client, clock.now - H)
        assert refused.status_code == 409
        assert "would erase usage fair share still counts" in refused.json()["detail"]
        assert "ended since" in refused.json()["detail"]
        assert purge(client, clock.now - H, dry_run=True).status_code == 409
        assert ctl.persist.store.get_job(ran) is not None
        # before the window's start: no force needed (nothing ended then)
        assert purge(client, clock.now - 21 * H).json()["jobs"] == 0
        forced = purge(client, clock.now - H, force=True)
        assert forced.status_code == 200 and forced.json()["jobs"] == 1
        assert ctl.persist.store.get_job(ran) is None
    finally:
        ctl.persist.close()


def test_only_cluster_admins_may_purge_and_it_is_audited(tmp_path: Path, clock: Clock) -> None:
    ctl, client = controller(tmp_path, clock, auth=True)
    try:
        auth = client.app.state.auth  # type: ignore[attr-defined]
        store = ctl.persist.store
        store.add_jobs([job(1, state=JobState.FAILED, phase="failed", end_time=10.0)])
        assert client.post("/v1/admin/purge", json={"ended_before": 100.0}).status_code == 401
        for role in ("user", "tenant-admin"):
            token, _ = auth.issue(TokenKind.USER, user="ana", tenant="ml", role=role)
            denied = client.post(
                "/v1/admin/purge",
                json={"ended_before": 100.0},
                headers={"authorization": f"Bearer {token}"},
            )
            assert denied.status_code == 403
            assert "only cluster-admins may purge job records" in denied.text
        agent = auth.issue_agent("n0")
        machine = client.post(
            "/v1/admin/purge",
            json={"ended_before": 100.0},
            headers={"authorization": f"Bearer {agent}"},
        )
        assert machine.status_code == 403
        assert store.get_job("1") is not None
        admin, _ = auth.issue(TokenKind.USER, user="root", tenant="ml", role="cluster-admin")
        answer = client.post(
            "/v1/admin/purge",
            json={"ended_before": 100.0},
            headers={"authorization": f"Bearer {admin}"},
        )
        assert answer.status_code == 200 and answer.json()["jobs"] == 1
        (audit,) = [e for e in _events(ctl) if e["kind"] == AUDIT]
        assert audit["data"]["action"] == "purge" and audit["data"]["by"] == "root"
        assert audit["data"]["jobs"] == 1 and audit["data"]["ended_before"] == 100.0
    finally:
        ctl.persist.close()


def test_one_purge_at_a_time(setup: tuple[Controller, TestClient]) -> None:
    ctl, client = setup
    lock = retention._lock_of(ctl)
    with lock:
        answer = purge(client, 100.0)
    assert answer.status_code == 409 and "another purge" in answer.text
    assert purge(client, 100.0).status_code == 200


def test_a_long_purge_goes_on_where_it_stopped(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Through a real server: the SDK calls again while the controller says ``more``."""
    server = ControllerServer(tmp_path / "data", port=0, auto_schedule=False).start()
    try:
        store = server.controller.persist.store
        ended = {"state": JobState.COMPLETED, "phase": "completed"}
        store.add_jobs([job(i, end_time=float(i), **ended) for i in range(1, 2501)])
        store.add_jobs([job(3000)])  # waiting
        monkeypatch.setattr(purge_routes, "BUDGET_S", 0.0)  # one batch of 1,000 per call
        client = Client(server.url)
        calls: list[dict[str, Any]] = []
        original = client._call

        def counted(method: str, path: str, body: Any = None, raw: bool = False) -> Any:
            answer = original(method, path, body, raw)
            if path == "/v1/admin/purge":
                calls.append(answer)
            return answer

        client._call = counted  # type: ignore[method-assign]
        dry = client.purge(2000.5, dry_run=True)
        assert dry["jobs"] == 2000 and dry["dry_run"] is True and len(calls) == 3
        assert [c["more"] for c in calls] == [True, True, False]
        assert calls[0]["after"] == {"end_time": 1000.0, "id": "1000"}
        calls.clear()
        done = client.purge(2000.5)
        assert done["jobs"] == 2000 and done["kept"] == 0 and len(calls) == 3
        assert {r.id for r in store.list_jobs(limit=5000)} == {
            str(i) for i in range(2001, 2501)
        } | {"3000"}
        with pytest.raises(ControllerError) as refused:
            client.purge(time.time() + 3600)
        assert refused.value.status == 400 and "in the future" in str(refused.value)
    finally:
        server.stop()


# --------------------------------------------------------------------------- retention


def test_retention_purges_what_ended_long_enough_ago(
    setup: tuple[Controller, TestClient], clock: Clock
) -> None:
    ctl, client = setup
    old = run_job(ctl, client)
    clock.now += 3 * DAY
    recent = run_job(ctl, client)
    clock.now += 1 * DAY
    counts = Retention(ctl, 2 * DAY).run_once()
    assert counts.jobs == 1
    assert ctl.persist.store.get_job(old) is None and ctl.persist.store.get_job(recent)
    (record,) = [e for e in _events(ctl) if e["kind"] == PURGED]
    assert record["data"]["source"] == "retention"


def test_retention_never_goes_into_fair_shares_window(
    tmp_path: Path, clock: Clock, caplog: pytest.LogCaptureFixture
) -> None:
    ctl, client = controller(tmp_path, clock, half_life_s=H)  # the window: 20 hours
    try:
        old = run_job(ctl, client)
        clock.now += 30 * H
        inside = run_job(ctl, client)
        clock.now += 10 * H
        keeper = Retention(ctl, 5 * H)  # would reach into the window
        assert keeper.run_once().jobs == 1
        assert ctl.persist.store.get_job(old) is None
        assert ctl.persist.store.get_job(inside) is not None  # 10 h ago: inside the window
        assert "fair share reads back the runs of 20 half-lives" in caplog.text
        assert "retention: removed the records of the jobs that ended before" in caplog.text
    finally:
        ctl.persist.close()


def test_retention_runs_in_a_thread_of_its_own_and_stops(
    setup: tuple[Controller, TestClient], clock: Clock
) -> None:
    ctl, client = setup
    old = run_job(ctl, client)
    clock.now += 3 * DAY
    keeper = Retention(ctl, DAY, interval_s=0.05, first_after_s=0.0).start()
    try:
        deadline = time.monotonic() + 10
        while keeper.runs < 2 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert keeper.runs >= 2 and ctl.persist.store.get_job(old) is None
        names = [t.name for t in threading.enumerate()]
        assert "fusesched-retention" in names
    finally:
        keeper.stop()
    assert "fusesched-retention" not in [t.name for t in threading.enumerate()]
    with pytest.raises(ValueError, match="must be positive"):
        Retention(ctl, 0.0)
    with pytest.raises(ValueError, match="must be positive"):
        Retention(ctl, math.inf)


def test_the_server_runs_retention_only_when_asked(tmp_path: Path) -> None:
    plain = ControllerServer(tmp_path / "a", port=0).start()
    try:
        assert plain.retention is None
    finally:
        plain.stop()
    kept = ControllerServer(tmp_path / "b", port=0, purge_after_s=90 * DAY).start()
    try:
        assert kept.retention is not None and kept.retention.after_s == 90 * DAY
    finally:
        kept.stop()
    assert kept.retention._stop.is_set()
