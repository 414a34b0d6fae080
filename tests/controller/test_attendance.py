"""InactiveLimit in the controller (controller/attendance.py, ``POST /v1/jobs/{id}/alive``),
with the agents' side played by hand and the limit's clock passed in: an attended job whose
holder went silent ends TIMEOUT (running) or cancelled (waiting) with the reason
``InactiveLimit: …``; a ping keeps it; a batch job is never watched; a restarted controller
gives every holder a full limit again; only the job's owner or an admin may ping."""

from __future__ import annotations

import time
from pathlib import Path

from fastapi.testclient import TestClient
from tests.builders import Clock
from tests.controller.conftest import ONE_NODE, one_node_controller
from tests.controller.test_actions_gaps import People
from tests.controller.test_running_limit import beat, started, submit

from fusesched.api.app import create_app
from fusesched.api.wire import NodeInventory, TaskReport, TaskState
from fusesched.controller import attendance
from fusesched.controller.inactive import DEFAULT_INACTIVE_LIMIT_S, MAX_PING_S, ended_by_limit
from fusesched.controller.logs import LogStore
from fusesched.controller.persist import Persistence
from fusesched.controller.records import ControllerConfig
from fusesched.controller.service import Controller
from fusesched.model.phases import JobPhase
from fusesched.store import TokenKind

LIMIT = DEFAULT_INACTIVE_LIMIT_S
WAITS = {"resources": {"cpu": "4"}, "argv": ["sleep", "1000"]}  # the whole node


def silent_for(seconds: float) -> float:
    """The limit's clock ``seconds`` after now (the jobs were submitted just before)."""
    return time.monotonic() + seconds


def test_a_running_job_whose_holder_went_silent_ends_timed_out(
    ctl: Controller, client: TestClient
) -> None:
    job = submit(client, attended=True)["id"]
    task = started(ctl)[job]
    assert attendance.check(ctl, silent_for(LIMIT - 1)) == []
    assert attendance.check(ctl, silent_for(LIMIT + 6)) == [job]
    (kill,) = beat(ctl, [task]).kill  # its tasks are stopped, with the reason
    assert kill.task_id == task and ended_by_limit(kill.reason), kill
    assert "stopped answering for 30" in kill.reason  # (~306 s)
    again = client.post(f"/v1/jobs/{job}/alive")  # (a salloc back from Ctrl-Z)
    assert again.status_code == 409 and "being stopped: InactiveLimit" in again.text
    exit_report = TaskReport(
        task_id=task, state=TaskState.EXITED, exit_code=-15, reason=kill.reason
    )
    beat(ctl, [], reports=[exit_report])
    ctl.run_cycle()
    assert ctl.core.jobs[job].phase is JobPhase.TIMEOUT  # as Slurm's _job_timed_out
    view = client.get(f"/v1/jobs/{job}").json()
    assert (view["state"], view["phase"]) == ("Failed", "timeout"), view
    assert view["reason"] == kill.reason
    ended = client.post(f"/v1/jobs/{job}/alive")
    assert ended.status_code == 409 and f"job {job} has ended" in ended.text


def test_pings_keep_the_job(ctl: Controller, client: TestClient) -> None:
    job = submit(client, attended=True)["id"]
    started(ctl)
    answer = client.post(f"/v1/jobs/{job}/alive")
    assert answer.status_code == 200, answer.text
    assert answer.json() == {"job_id": job, "inactive_limit_s": LIMIT, "ping_every_s": MAX_PING_S}
    attendance.alive(ctl, job, silent_for(200))
    assert attendance.check(ctl, silent_for(LIMIT + 1)) == []  # heard 101 s before
    assert attendance.check(ctl, silent_for(200 + LIMIT + 1)) == [job]


def test_a_waiting_job_whose_holder_went_silent_is_cancelled(
    ctl: Controller, client: TestClient
) -> None:
    submit(client)  # runs: the node is full
    started(ctl)
    job = submit(client, WAITS, attended=True)["id"]
    ctl.run_cycle()
    assert ctl.core.jobs[job].phase is JobPhase.QUEUED
    assert attendance.check(ctl, silent_for(LIMIT + 1)) == [job]
    ctl.run_cycle()
    rec = ctl.core.jobs[job]
    assert rec.phase is JobPhase.CANCELLED
    assert rec.history[-1].reason.startswith(
        "InactiveLimit: the salloc/run waiting for the allocation stopped answering for"
    )


def test_a_batch_job_is_never_ended_by_the_limit(ctl: Controller, client: TestClient) -> None:
    job = submit(client)["id"]
    task = started(ctl)[job]
    assert not ctl.holders.knows(job)
    assert attendance.check(ctl, silent_for(100 * LIMIT)) == []
    assert beat(ctl, [task]).kill == []
    refused = client.post(f"/v1/jobs/{job}/alive")
    assert refused.status_code == 409 and "not submitted attended" in refused.text
    unknown = client.post("/v1/jobs/999/alive")
    assert unknown.status_code == 404 and "no job '999'" in unknown.text


def test_a_restarted_controller_gives_every_holder_a_full_limit(
    tmp_path: Path, clock: Clock
) -> None:
    first = one_node_controller(tmp_path, clock)
    client = TestClient(create_app(first))
    running = submit(client, attended=True)["id"]
    started(first)
    waiting = submit(client, WAITS, attended=True)["id"]
    batch = submit(client, WAITS)["id"]
    first.run_cycle()
    first.persist.close()
    again = one_node_controller(tmp_path, clock)  # (the controller was down meanwhile)
    try:
        holders = attendance.recovered(again, now=5000.0)
        assert (holders.knows(running), holders.knows(waiting), holders.knows(batch)) == (
            True,
            True,
            False,
        )
        assert holders.overdue(5000.0 + LIMIT) == []  # a full limit from the restart
        assert {s.job_id for s in holders.overdue(5000.0 + LIMIT + 5)} == {running, waiting}
        assert again.holders.knows(running) and again.holders.knows(waiting)
    finally:
        again.persist.close()


def test_only_the_owner_or_an_admin_may_keep_a_job_alive(ctl: Controller) -> None:
    people = People(ctl)
    job = people.submit("alice", attended=True)["id"]
    assert people.post("alice", f"/v1/jobs/{job}/alive").status_code == 200
    assert people.post("tina", f"/v1/jobs/{job}/alive").status_code == 200  # her tenant's admin
    auth = people.client.app.state.auth  # another user of the same tenant
    people.tokens["bob"], _ = auth.issue(TokenKind.USER, user="bob", tenant="t", role="user")
    refused = people.post("bob", f"/v1/jobs/{job}/alive")
    assert refused.status_code == 403, refused.text
    assert "only they or an admin may answer for it" in refused.text


def test_off_ends_nothing(tmp_path: Path) -> None:
    persist = Persistence(f"sqlite:///{tmp_path / 'db.sqlite'}")
    config = ControllerConfig(inactive_limit_s=0)
    ctl = Controller(persist, LogStore(tmp_path / "logs"), config, clock=Clock())
    ctl.register(NodeInventory.model_validate(ONE_NODE))
    try:
        client = TestClient(create_app(ctl))
        job = submit(client, attended=True)["id"]
        started(ctl)
        assert attendance.check(ctl, silent_for(1e6)) == []
        answer = client.post(f"/v1/jobs/{job}/alive").json()
        assert (answer["inactive_limit_s"], answer["ping_every_s"]) == (0, MAX_PING_S)
    finally:
        persist.close()
