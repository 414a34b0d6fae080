"""POST /v1/reconfigure (controller/reconfigure.py): the controller re-reads its tenancy file
and takes new license counts without a restart; an invalid file or a change that would orphan
work changes nothing; only cluster-admins may ask."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from fastapi.testclient import TestClient
from sqlalchemy import select
from tests.builders import Clock, one_queue_tenancy
from tests.controller.conftest import ONE_NODE

from fusesched.api.app import create_app
from fusesched.api.wire import Heartbeat, NodeInventory, TaskReport, TaskState
from fusesched.controller import reconfigure as reconfiguring
from fusesched.controller.auth import Authenticator
from fusesched.controller.logs import LogStore
from fusesched.controller.persist import Persistence
from fusesched.controller.reconfigure import (
    NO_TENANCY_FILE,
    hangup,
    read_tenancy_file,
    reload_core,
)
from fusesched.controller.records import ControllerConfig
from fusesched.controller.service import Controller
from fusesched.model.licenses import parse_licenses
from fusesched.policies.registry import CoreConfig
from fusesched.store import TokenKind
from fusesched.store.schema import events


def write(path: Path, cpus: int, **extra: Any) -> None:
    """The tenancy file: queue ``train`` (lab → ml) with ``cpus`` CPUs of quota."""
    path.write_text(yaml.safe_dump(one_queue_tenancy({"cpu": cpus}, **extra)))


def controller(
    tmp_path: Path, tenancy: Path | None, licenses: str = "", auth: bool = False
) -> tuple[Controller, TestClient]:
    core = CoreConfig(
        placement="best-fit",
        tenancy=read_tenancy_file(tenancy) if tenancy is not None else None,
        licenses=parse_licenses(licenses) if licenses else (),
    )
    persist = Persistence(f"sqlite:///{tmp_path / 'db.sqlite'}")
    ctl = Controller(
        persist,
        LogStore(tmp_path / "logs"),
        ControllerConfig(core=core, tenancy_file=tenancy),
        clock=Clock(),
    )
    ctl.register(NodeInventory.model_validate(ONE_NODE))
    checker = Authenticator(persist.store, enabled=auth)
    return ctl, TestClient(create_app(ctl, checker), raise_server_exceptions=False)


@pytest.fixture
def tenancy(tmp_path: Path) -> Path:
    path = tmp_path / "tenancy.yaml"
    write(path, 2)
    return path


@pytest.fixture
def setup(tmp_path: Path, tenancy: Path) -> Iterator[tuple[Controller, TestClient]]:
    ctl, client = controller(tmp_path, tenancy)
    yield ctl, client
    ctl.persist.close()


def submit(client: TestClient, cpu: str = "2", queue: str = "train", **extra: Any) -> str:
    body = {"groups": [{"resources": {"cpu": cpu}, "argv": ["true"]}], "queue": queue, **extra}
    answer = client.post("/v1/jobs", json=body)
    assert answer.status_code == 201, answer.text
    return str(answer.json()["id"])


def launched(ctl: Controller, running: tuple[str, ...] = ()) -> dict[str, str]:
    """Run a cycle; job id -> task id of what n0 is told to launch."""
    ctl.run_cycle()
    reply = ctl.heartbeat(Heartbeat(node="n0", running=list(running)), wait_s=0)
    return {launch.job_id: launch.task_id for launch in reply.launch}


def state(client: TestClient, job_id: str) -> str:
    return str(client.get(f"/v1/jobs/{job_id}").json()["state"])


def nominal(client: TestClient) -> str:
    (queue,) = client.get("/v1/queues").json()
    return str(queue["quota"][0]["nominal"])


def test_a_raised_quota_starts_the_waiting_job(
    setup: tuple[Controller, TestClient], tenancy: Path
) -> None:
    ctl, client = setup
    first, second = submit(client), submit(client)
    tasks = launched(ctl)
    assert set(tasks) == {first}  # the second waits for the queue's quota of 2
    running = tuple(tasks.values())
    assert launched(ctl, running) == {}
    write(tenancy, 4)
    answer = client.post("/v1/reconfigure", json={"dry_run": True})
    assert answer.status_code == 200, answer.text
    assert answer.json()["applied"] is False
    assert [c["text"] for c in answer.json()["changes"]] == [
        "queue train changed (quota any/cpu nominal 2 → 4)"
    ]
    assert launched(ctl, running) == {} and nominal(client) == "2"  # a dry run changes nothing
    answer = client.post("/v1/reconfigure")  # (no body: re-read the file)
    assert answer.status_code == 200, answer.text
    found = answer.json()
    assert found["applied"] is True and found["tenancy_file"] == str(tenancy)
    assert [c["text"] for c in found["changes"]] == [
        "queue train changed (quota any/cpu nominal 2 → 4)"
    ]
    assert nominal(client) == "4"  # fusesched queues shows it at once
    assert set(launched(ctl, running)) == {second}
    assert state(client, first) == state(client, second) == "Running"
    again = client.post("/v1/reconfigure").json()
    assert again["applied"] is False and again["changes"] == []


def test_an_invalid_file_changes_nothing(
    setup: tuple[Controller, TestClient], tenancy: Path
) -> None:
    ctl, client = setup
    submit(client)
    second = submit(client)
    running = tuple(launched(ctl).values())
    tenancy.write_text("organisations:\n  - name: lab\n    tenants: [{name: ml, queues: [{}]}]\n")
    answer = client.post("/v1/reconfigure")
    assert answer.status_code == 400
    assert answer.json()["detail"] == (
        f"{tenancy}: queue name must be a non-empty string without '/', got ''; nothing was changed"
    )
    tenancy.write_text("flavors: [\n")
    answer = client.post("/v1/reconfigure")
    assert answer.status_code == 400
    assert answer.json()["detail"].startswith(f"{tenancy}:2: not valid YAML")
    tenancy.unlink()
    answer = client.post("/v1/reconfigure")
    assert answer.status_code == 400
    assert "cannot read the tenancy configuration" in answer.json()["detail"]
    assert nominal(client) == "2" and launched(ctl, running) == {}  # the old quota applies
    assert state(client, second) == "Pending"


def test_removing_a_queue_with_jobs_is_refused(
    setup: tuple[Controller, TestClient], tenancy: Path
) -> None:
    ctl, client = setup
    submit(client)
    submit(client)
    launched(ctl)
    other = one_queue_tenancy({"cpu": 4})
    other["organisations"][0]["tenants"][0]["queues"][0]["name"] = "infer"  # type: ignore[index]
    tenancy.write_text(yaml.safe_dump(other))
    answer = client.post("/v1/reconfigure")
    assert answer.status_code == 409
    assert answer.json()["detail"] == (
        "refused, nothing was changed: queue train has 1 waiting and 1 running jobs: drain it "
        "first (let them end or cancel them), then remove it"
    )
    assert nominal(client) == "2"
    # a job just accepted (not yet handed to the scheduler) counts too
    write(tenancy, 2)
    submit(client, qos="bronze")
    write(tenancy, 2, qos={"silver": {"priority": 50}})
    answer = client.post("/v1/reconfigure")
    assert answer.status_code == 409
    assert "qos bronze has 1 waiting job" in answer.json()["detail"]


def test_only_cluster_admins_may_reconfigure(tmp_path: Path, tenancy: Path) -> None:
    ctl, client = controller(tmp_path, tenancy, auth=True)
    try:
        auth = Authenticator(ctl.persist.store, enabled=True)
        admin, _ = auth.issue(TokenKind.USER, user="root", tenant="ml", role="cluster-admin")
        for role in ("user", "tenant-admin"):
            token, _ = auth.issue(TokenKind.USER, user="alice", tenant="ml", role=role)
            answer = client.post("/v1/reconfigure", headers={"authorization": f"Bearer {token}"})
            assert answer.status_code == 403
            assert answer.json()["detail"] == "only cluster-admins may reconfigure the controller"
        write(tenancy, 3)
        answer = client.post("/v1/reconfigure", headers={"authorization": f"Bearer {admin}"})
        assert answer.status_code == 200, answer.text
        assert nominal_as(client, admin) == "3"
        with ctl.persist.store._read() as conn:  # (who changed what: the audit log)
            rows = conn.execute(select(events).where(events.c.kind == "Audit")).mappings()
            audits = [r["data"] for r in rows]
        assert [(a["action"], a["by"]) for a in audits] == [("reconfigure", "root")]
        assert audits[0]["changes"] == ["queue train changed (quota any/cpu nominal 2 → 3)"]
    finally:
        ctl.persist.close()


def nominal_as(client: TestClient, token: str) -> str:
    (queue,) = client.get("/v1/queues", headers={"authorization": f"Bearer {token}"}).json()
    return str(queue["quota"][0]["nominal"])


def test_licenses_change_without_a_tenancy_file(tmp_path: Path) -> None:
    ctl, client = controller(tmp_path, None, licenses="matlab:1")
    try:
        first = submit(client, cpu="1", queue="default", licenses={"matlab": 1})
        second = submit(client, cpu="1", queue="default", licenses={"matlab": 1})
        tasks = launched(ctl)
        assert set(tasks) == {first}
        answer = client.post("/v1/reconfigure", json={"licenses": {"matlab": 2}})
        assert answer.status_code == 200, answer.text
        found = answer.json()
        assert found["tenancy_file"] is None and found["applied"] is True
        assert [c["text"] for c in found["changes"]] == ["license matlab changed (count 1 → 2)"]
        assert found["notes"][0] == NO_TENANCY_FILE
        more = launched(ctl, tuple(tasks.values()))
        assert set(more) == {second}
        running = (*tasks.values(), *more.values())
        (row,) = client.get("/v1/licenses").json()
        assert (row["total"], row["in_use"], row["free"]) == (2, 2, 0)
        # lowered below use: both keep running; a third waits until enough is back
        answer = client.post("/v1/reconfigure", json={"licenses": {"matlab": 1}})
        assert answer.status_code == 200, answer.text
        assert "running jobs hold 2, above the new count 1" in answer.json()["notes"][1]
        third = submit(client, cpu="1", queue="default", licenses={"matlab": 1})
        assert launched(ctl, running) == {}
        assert state(client, first) == state(client, second) == "Running"
        (row,) = client.get("/v1/licenses").json()
        assert (row["total"], row["in_use"], row["free"]) == (1, 2, 0)
        # removing a license in use is refused; a malformed list is a 400 / 422
        answer = client.post("/v1/reconfigure", json={"licenses": {}})
        assert answer.status_code == 409
        assert (
            "license matlab is held by 2 running jobs and asked for by 1 waiting job"
            in (answer.json()["detail"])
        )
        answer = client.post("/v1/reconfigure", json={"licenses": {"mat lab": 1}})
        assert answer.status_code == 400 and "invalid license name" in answer.json()["detail"]
        answer = client.post("/v1/reconfigure", json={"licenses": {"matlab": "2"}})
        assert answer.status_code == 422
        # both end: the third gets the one license
        reports = [TaskReport(task_id=t, state=TaskState.EXITED, exit_code=0) for t in running]
        ctl.heartbeat(Heartbeat(node="n0", reports=reports, running=[]), wait_s=0)
        assert set(launched(ctl)) == {third}
    finally:
        ctl.persist.close()


def test_a_standby_reads_the_file_again_when_it_takes_over(
    tenancy: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """(ControllerServer builds a standby's controller from reload_core when it leads.)"""
    started = CoreConfig(tenancy=read_tenancy_file(tenancy))
    write(tenancy, 6)
    taken = reload_core(started, tenancy)
    assert taken.tenancy == read_tenancy_file(tenancy) != started.tenancy
    tenancy.write_text("organisations: 3\n")
    assert reload_core(started, tenancy) is started  # invalid now: the one read at the start
    assert "taking over with the tenancy read at startup" in caplog.text
    assert reload_core(started, None) is started


def test_overlapping_reconfigurations_leave_the_file_last_read_in_force(
    setup: tuple[Controller, TestClient], tenancy: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A reconfiguration reads the file (2 CPUs → 3) and is slow to apply it; meanwhile the
    file is edited again (4) and a second one runs. The second waits for the first and reads
    the file then: the 4 is in force, not the 3 read first and applied last."""
    ctl, client = setup
    first_read, go = threading.Event(), threading.Event()
    real = reconfiguring.read_tenancy_file

    def slow_once(path: Path) -> Any:
        policy = real(path)
        if not first_read.is_set():
            first_read.set()
            go.wait(timeout=10)
        return policy

    monkeypatch.setattr(reconfiguring, "read_tenancy_file", slow_once)
    write(tenancy, 3)
    answers: dict[str, int] = {}

    def post(name: str) -> None:
        answers[name] = client.post("/v1/reconfigure").status_code

    slow = threading.Thread(target=post, args=("slow",))
    slow.start()
    assert first_read.wait(timeout=10)
    write(tenancy, 4)
    second = threading.Thread(target=post, args=("second",))
    second.start()
    second.join(timeout=1)  # (it waits for the first: no sooner)
    go.set()
    for thread in (slow, second):
        thread.join(timeout=10)
    assert answers == {"slow": 200, "second": 200}
    assert nominal(client) == "4"
    policy = ctl.core.config.tenancy
    assert policy is not None and policy == read_tenancy_file(tenancy)


def test_a_sighup_that_changes_something_is_in_the_audit_log(tmp_path: Path, tenancy: Path) -> None:
    ctl, _client = controller(tmp_path, tenancy, auth=True)
    ctl.auth = Authenticator(ctl.persist.store, enabled=True)  # (as ControllerServer gives it)
    try:
        write(tenancy, 3)
        said = hangup(ctl)
        assert (
            said == f"SIGHUP: re-read {tenancy}: queue train changed (quota any/cpu nominal 2 → 3)"
        )
        assert hangup(ctl) == f"SIGHUP: re-read {tenancy}: nothing changed"
        with ctl.persist.store._read() as conn:
            rows = conn.execute(select(events).where(events.c.kind == "Audit")).mappings()
            audits = [r["data"] for r in rows]
        assert audits == [
            {
                "action": "reconfigure",
                "by": "SIGHUP",
                "changes": ["queue train changed (quota any/cpu nominal 2 → 3)"],
            }
        ]
        assert hangup(None).startswith("SIGHUP: not leading")
    finally:
        ctl.persist.close()
