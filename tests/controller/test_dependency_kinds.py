"""Dependency kinds through the live controller and its API: ``after`` (the other job
started), ``afternotok`` (it ended in failure), ``singleton`` (the earlier jobs of the same
name and user ended) — refusals at submission, and what a restarted controller makes of
waiting jobs whose dependencies' jobs started or ended before the restart."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from tests.builders import Clock
from tests.controller.conftest import one_node_controller

from fusesched.api.app import create_app
from fusesched.api.wire import Heartbeat, TaskReport, TaskState
from fusesched.controller.service import Controller
from fusesched.model.phases import JobPhase

HALF = {"resources": {"cpu": "2"}, "argv": ["true"]}  # half of n0
WHOLE = {"resources": {"cpu": "4"}, "argv": ["true"]}


def submit(client: TestClient, group: dict[str, Any] = HALF, **extra: Any) -> str:
    answer = client.post("/v1/jobs", json={"groups": [group], **extra})
    assert answer.status_code == 201, answer.text
    return str(answer.json()["id"])


def on(kind: str, *job_ids: str) -> list[dict[str, str]]:
    return [{"kind": kind, "job_id": j} for j in job_ids]


def running(ctl: Controller, but: str = "") -> list[str]:
    """The tasks n0 runs (as its agent would list them), but ``but``."""
    return [t for t, (_, task) in ctl.tasks.items() if task.state != "exited" and t != but]


def launched(ctl: Controller) -> dict[str, str]:
    """Run a cycle; the jobs the node is told to start (job id → task id)."""
    ctl.run_cycle()
    reply = ctl.heartbeat(Heartbeat(node="n0", running=running(ctl)), wait_s=0)
    return {launch.job_id: launch.task_id for launch in reply.launch}


def exit_task(ctl: Controller, task: str, code: int = 0) -> None:
    """``task`` exits with ``code`` (the node's other tasks go on), and a cycle runs."""
    report = TaskReport(task_id=task, state=TaskState.EXITED, exit_code=code)
    ctl.heartbeat(Heartbeat(node="n0", reports=[report], running=running(ctl, task)), wait_s=0)
    ctl.run_cycle()


def view(client: TestClient, job_id: str) -> dict[str, Any]:
    return dict(client.get(f"/v1/jobs/{job_id}").json())


# ============================================================================ kinds


def test_after_starts_with_its_job(ctl: Controller, client: TestClient) -> None:
    first = submit(client)
    second = submit(client, dependencies=on("after", first))
    assert set(launched(ctl)) == {first, second}  # one cycle


def test_after_waits_for_its_job_to_start(ctl: Controller, client: TestClient) -> None:
    blocker = submit(client, WHOLE)
    task = launched(ctl)[blocker]
    first = submit(client, HALF)
    second = submit(client, HALF, dependencies=on("after", first))
    assert launched(ctl) == {}
    assert ctl.core.jobs[second].phase is JobPhase.PENDING
    exit_task(ctl, task)
    assert set(launched(ctl)) == {first, second}


@pytest.mark.parametrize(("code", "runs"), [(1, True), (0, False)])
def test_afternotok(ctl: Controller, client: TestClient, code: int, runs: bool) -> None:
    first = submit(client)
    fallback = submit(client, dependencies=on("afternotok", first))
    task = launched(ctl)[first]
    assert view(client, fallback)["state"] == "Pending"
    exit_task(ctl, task, code)
    if runs:
        assert list(launched(ctl)) == [fallback]
    else:
        shown = view(client, fallback)
        assert (shown["state"], shown["reason"]) == (
            "Cancelled",
            f"dependency {first} completed: afternotok can never be met",
        )


def test_singleton(ctl: Controller, client: TestClient) -> None:
    first = submit(client, name="nightly", user="ann")
    other_user = submit(client, name="nightly", user="bob")
    started = launched(ctl)
    assert set(started) == {first, other_user}
    task = started[first]
    second = submit(client, name="nightly", user="ann", dependencies=[{"kind": "singleton"}])
    exit_task(ctl, started[other_user])  # room for it: it still waits for ann's first
    assert ctl.core.jobs[second].waiting_on == {first}
    assert launched(ctl) == {}
    exit_task(ctl, task, 3)
    assert list(launched(ctl)) == [second]


def test_a_singleton_without_a_name_is_refused(client: TestClient) -> None:
    answer = client.post(
        "/v1/jobs", json={"groups": [HALF], "dependencies": [{"kind": "singleton"}]}
    )
    assert answer.status_code == 400
    assert answer.json() == {"detail": "a singleton dependency needs a job name (sbatch -J, name:)"}


@pytest.mark.parametrize(
    ("dependencies", "status", "message"),
    [
        (on("after", "999"), 400, "dependency on unknown job '999'"),
        (on("afternotok", "999"), 400, "dependency on unknown job '999'"),
        ([{"kind": "singleton", "job_id": "1"}], 422, "singleton names no job_id"),
        ([{"kind": "after"}], 422, "after needs job_id"),
    ],
)
def test_refusals(client: TestClient, dependencies: object, status: int, message: str) -> None:
    answer = client.post(
        "/v1/jobs", json={"groups": [HALF], "name": "n", "dependencies": dependencies}
    )
    assert answer.status_code == status, answer.text
    assert message in answer.text


def test_after_on_an_array_member(ctl: Controller, client: TestClient) -> None:
    made = client.post("/v1/jobs", json={"groups": [HALF], "array": {"start": 0, "stop": 2}})
    members = made.json()["ids"]
    later = submit(client, dependencies=on("after", members[2]))
    started = launched(ctl)
    assert set(started) == set(members[:2])  # the third member and `later` wait for room
    exit_task(ctl, started[members[0]])
    assert set(launched(ctl)) == {members[2]}  # `later` needs room beside it
    assert ctl.core.jobs[later].phase is JobPhase.QUEUED


# ============================================================================ restarts


def restarted(tmp_path: Path, clock: Clock, ctl: Controller) -> tuple[Controller, TestClient]:
    ctl.persist.close()
    again = one_node_controller(tmp_path, clock)  # n0 registers: running jobs are adopted
    return again, TestClient(create_app(again), raise_server_exceptions=False)


def test_after_on_a_job_that_ended_before_a_restart(tmp_path: Path, clock: Clock) -> None:
    ctl = one_node_controller(tmp_path, clock)
    client = TestClient(create_app(ctl), raise_server_exceptions=False)
    first, blocker = submit(client), submit(client)
    tasks = launched(ctl)
    waiting = submit(client, WHOLE, dependencies=on("after", first))
    ctl.run_cycle()
    assert ctl.core.jobs[waiting].phase is JobPhase.QUEUED  # met: it waits for room
    report = TaskReport(task_id=tasks[first], state=TaskState.EXITED, exit_code=0)
    ctl.heartbeat(Heartbeat(node="n0", reports=[report], running=[tasks[blocker]]), wait_s=0)
    ctl.run_cycle()
    assert view(client, first)["state"] == "Completed"
    again, client = restarted(tmp_path, clock, ctl)
    try:
        again.run_cycle()
        assert view(client, waiting)["state"] == "Pending"  # not "dependency on unknown job"
        assert again.core.jobs[waiting].phase is JobPhase.QUEUED
        assert again.core.jobs[waiting].spec.dependencies == ()  # met before the restart
        assert again.core.jobs[blocker].phase is JobPhase.RUNNING  # adopted
        exit_task(again, tasks[blocker])
        assert list(launched(again)) == [waiting]
    finally:
        again.persist.close()


def test_afterok_on_a_job_that_ended_before_a_restart(tmp_path: Path, clock: Clock) -> None:
    ctl = one_node_controller(tmp_path, clock)
    client = TestClient(create_app(ctl), raise_server_exceptions=False)
    first, blocker = submit(client), submit(client)
    tasks = launched(ctl)
    waiting = submit(client, WHOLE, dependencies=on("afterok", first))
    report = TaskReport(task_id=tasks[first], state=TaskState.EXITED, exit_code=0)
    ctl.heartbeat(Heartbeat(node="n0", reports=[report], running=[tasks[blocker]]), wait_s=0)
    ctl.run_cycle()
    again, client = restarted(tmp_path, clock, ctl)
    try:
        again.run_cycle()
        assert again.core.jobs[waiting].phase is JobPhase.QUEUED
        assert view(client, waiting)["state"] == "Pending"
    finally:
        again.persist.close()


def test_after_on_a_job_running_at_a_restart(tmp_path: Path, clock: Clock) -> None:
    ctl = one_node_controller(tmp_path, clock)
    client = TestClient(create_app(ctl), raise_server_exceptions=False)
    first = submit(client, WHOLE)
    task = launched(ctl)[first]
    waiting = submit(client, HALF, dependencies=on("after", first))
    ctl.run_cycle()
    again, client = restarted(tmp_path, clock, ctl)
    try:
        again.run_cycle()
        assert again.core.jobs[first].phase is JobPhase.RUNNING  # adopted
        assert again.core.jobs[waiting].phase is JobPhase.QUEUED  # met: it waits for room
        exit_task(again, task, 1)
        assert list(launched(again)) == [waiting]
    finally:
        again.persist.close()


def test_after_on_a_job_still_waiting_at_a_restart(tmp_path: Path, clock: Clock) -> None:
    ctl = one_node_controller(tmp_path, clock)
    client = TestClient(create_app(ctl), raise_server_exceptions=False)
    blocker = submit(client, WHOLE)
    task = launched(ctl)[blocker]
    first = submit(client, HALF)
    second = submit(client, HALF, dependencies=on("after", first))
    ctl.run_cycle()
    again, client = restarted(tmp_path, clock, ctl)
    try:
        again.run_cycle()
        assert again.core.jobs[second].phase is JobPhase.PENDING
        assert again.core.jobs[second].waiting_on == {first}
        exit_task(again, task)
        assert set(launched(again)) == {first, second}
    finally:
        again.persist.close()


def test_afternotok_broken_before_a_restart_is_rejected_at_recovery(
    tmp_path: Path, clock: Clock
) -> None:
    ctl = one_node_controller(tmp_path, clock)
    client = TestClient(create_app(ctl), raise_server_exceptions=False)
    first = submit(client)
    fallback = submit(client, dependencies=on("afternotok", first))
    launched(ctl)
    # the store learned that the job completed; the controller stopped before it settled
    # the waiting job (as a crash between the two would leave it)
    ctl.persist.job_finished(first, JobPhase.COMPLETED, 0, "exit 0", clock())
    ctl.persist.flush()
    again, client = restarted(tmp_path, clock, ctl)
    try:
        shown = view(client, fallback)
        assert (shown["state"], shown["reason"]) == (
            "Cancelled",
            f"dependency {first} completed: afternotok can never be met",
        )
        assert fallback not in again.jobs and fallback not in again.core.jobs
    finally:
        again.persist.close()


def test_afternotok_met_before_a_restart(tmp_path: Path, clock: Clock) -> None:
    ctl = one_node_controller(tmp_path, clock)
    client = TestClient(create_app(ctl), raise_server_exceptions=False)
    first = submit(client)
    fallback = submit(client, dependencies=on("afternotok", first))
    launched(ctl)
    ctl.persist.job_finished(first, JobPhase.FAILED, 1, "exit 1", clock())
    ctl.persist.flush()
    again, client = restarted(tmp_path, clock, ctl)
    try:
        # the store still shows first's task running (only the job's end was written): n0
        # is held until its first beat says the task is gone (COMPLETING), then fallback runs
        assert launched(again) == {}
        assert list(launched(again)) == [fallback]
    finally:
        again.persist.close()


def test_a_singleton_waits_again_after_a_restart(tmp_path: Path, clock: Clock) -> None:
    ctl = one_node_controller(tmp_path, clock)
    client = TestClient(create_app(ctl), raise_server_exceptions=False)
    first = submit(client, name="n", user="u")
    task = launched(ctl)[first]
    second = submit(client, name="n", user="u", dependencies=[{"kind": "singleton"}])
    ctl.run_cycle()
    again, client = restarted(tmp_path, clock, ctl)
    try:
        again.run_cycle()
        assert again.core.jobs[second].phase is JobPhase.PENDING
        assert again.core.jobs[second].waiting_on == {first}
        exit_task(again, task)
        assert list(launched(again)) == [second]
    finally:
        again.persist.close()
