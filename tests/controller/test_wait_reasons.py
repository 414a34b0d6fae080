"""Why a waiting job waits, through the API: the core's reason (``Resources``, ``Priority``)
is stored once when it changes, not rewritten every cycle; explicit reasons (a hold) keep
precedence; a job that starts has its waiting reason cleared."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from tests.builders import Clock

from fusesched.api.wire import NodeInventory
from fusesched.controller import holds
from fusesched.controller.persist import Persistence
from fusesched.controller.service import Controller
from fusesched.model.phases import JobPhase
from fusesched.store.records import JobChange
from fusesched.submit.request import JobRequest

from .conftest import ONE_NODE, one_node_controller
from .test_dependency_kinds import exit_task, launched, restarted


def request(cpu: str) -> JobRequest:
    return JobRequest.model_validate(
        {"groups": [{"resources": {"cpu": cpu}, "argv": ["sleep", "60"]}], "walltime_s": 600}
    )


def reason(client: TestClient, job_id: str) -> Any:
    answer = client.get(f"/v1/jobs/{job_id}")
    assert answer.status_code == 200, answer.text
    return answer.json()["reason"]


@pytest.fixture
def written(ctl: Controller, monkeypatch: pytest.MonkeyPatch) -> list[JobChange]:
    """Every job change the controller writes to the store."""
    seen: list[JobChange] = []
    store = ctl.persist.store
    write = store.write_changes

    def spy(**changes: Any) -> None:
        seen.extend(changes["job_changes"])
        write(**changes)

    monkeypatch.setattr(store, "write_changes", spy)
    return seen


def test_reasons_appear_change_once_and_are_not_rewritten(
    ctl: Controller, client: TestClient, clock: Clock, written: list[JobChange]
) -> None:
    (running,) = ctl.submit([request("4")])  # n0's 4 CPUs
    task = launched(ctl)[running]
    big, small = ctl.submit([request("4"), request("1")])
    ctl.run_cycle()
    assert (reason(client, big), reason(client, small)) == ("Resources", "Priority")
    for _ in range(5):
        clock.now += 1
        ctl.run_cycle()
    said = [(c.id, c.reason) for c in written if c.id in (big, small) and c.reason != ""]
    assert said == [(big, "Resources"), (small, "Priority")]  # once each

    holds.hold(ctl, big, "not yet")  # an explicit reason wins
    ctl.run_cycle()
    assert reason(client, big) == "held: not yet"
    assert reason(client, small) == "Resources"  # now first in line

    exit_task(ctl, task)
    assert ctl.core.jobs[small].phase.value == "running"
    assert reason(client, small) == ""  # started: the waiting reason is gone
    assert reason(client, big) == "held: not yet"


def test_a_job_started_first_thing_after_a_restart_has_its_waiting_reason_cleared(
    tmp_path: Path, clock: Clock
) -> None:
    """The reason stored by the controller before the restart is the core's too: a job that
    starts in the new controller's first cycle must not run on with 'Resources'."""
    ctl = one_node_controller(tmp_path, clock)
    ctl.submit([request("4")])  # n0's 4 CPUs
    launched(ctl)
    (big,) = ctl.submit([request("4")])
    ctl.run_cycle()
    again, client = restarted(tmp_path, clock, ctl)
    try:
        assert reason(client, big) == "Resources"
        again.register(NodeInventory.model_validate({**ONE_NODE, "name": "n1"}))  # room
        again.run_cycle()
        assert again.core.jobs[big].phase is JobPhase.RUNNING
        assert reason(client, big) == ""
    finally:
        again.persist.close()


def test_a_requeued_job_says_why_after_the_cores_reason(tmp_path: Path) -> None:
    persist = Persistence(f"sqlite:///{tmp_path / 'db.sqlite'}")
    why = "requeued (preempted for job 8)"
    try:
        persist.job_requeued("7", JobPhase.QUEUED, why, 1, 0.0)
        persist.wait_reasons({"7": "Priority"})
        persist.wait_reasons({"7": "Priority"})  # (the same: nothing written)
        persist.wait_reasons({})  # (waits out a back-off, say: the core says nothing)
        said = [c.reason for c in persist._job_changes if c.id == "7"]
        assert said == [why, f"Priority; {why}", why]
    finally:
        persist._job_changes, persist._events = [], []  # (job 7 has no row to change)
        persist.close()


def test_a_requeued_jobs_back_off_is_not_said_once_it_is_over(tmp_path: Path) -> None:
    """Back in the queue, its back-off has passed: 'eligible at <then>' would mislead."""
    persist = Persistence(f"sqlite:///{tmp_path / 'db.sqlite'}")
    why = "requeued (preempted for job 8)"
    try:
        persist.job_requeued("7", JobPhase.QUEUED, f"{why}; eligible at 2026-12-06 14:00", 1, 0.0)
        persist.wait_reasons({"7": "Resources"})
        assert persist._job_changes[-1].reason == f"Resources; {why}"
    finally:
        persist._job_changes, persist._events = [], []  # (job 7 has no row to change)
        persist.close()
