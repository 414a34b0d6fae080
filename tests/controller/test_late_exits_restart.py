"""Holes around tasks that outlive their job's run (controller/late_exits.py): a controller
restart while such a task is still dying (its row was left ``Running`` for ever), a job
requeued after a restart while waiting for a node (its own tasks' CPU ids were lost), a late
exit of a task no longer among the recently finished ones or past the cap, a new run's task
ids taking those of an earlier run, and a requeued job's step not adopted after a restart.
The agent is played by hand."""

from __future__ import annotations

from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from tests.builders import Clock
from tests.controller.conftest import ONE_NODE, one_node_controller
from tests.controller.test_late_exits import _cancelled_with_a_step_left
from tests.controller.test_restart_always import exits, launched, relaunch, service
from tests.controller.test_step_accounting import end, step
from tests.controller.test_step_route import beat

from fusesched.api.app import create_app
from fusesched.api.wire import Heartbeat, NodeInventory, TaskLaunch, TaskReport, TaskState
from fusesched.controller import late_exits
from fusesched.controller.logs import LogStore
from fusesched.controller.persist import Persistence
from fusesched.controller.service import Controller
from fusesched.store.records import JobState, TaskRow
from fusesched.submit.sbatch import parse_sbatch


def _controller(path: Path, clock: Clock) -> Controller:
    return Controller(
        Persistence(f"sqlite:///{path / 'db.sqlite'}"), LogStore(path / "logs"), clock=clock
    )


def _inventory(name: str, running: list[TaskLaunch] | None = None) -> NodeInventory:
    return NodeInventory.model_validate({**ONE_NODE, "name": name, "running": running or []})


def _row(ctl: Controller, job: str, task: str) -> TaskRow:
    ctl.persist.flush()
    (row,) = [t for t in ctl.persist.store.tasks_for_job(job) if t.task_id == task]
    return row


def _restarted_while_a_step_dies(tmp_path: Path, clock: Clock) -> tuple[Controller, str, str]:
    """A cancelled job whose step task still dies as its controller stops without a word;
    the controller started again (no node back yet). (controller, job id, step task id)"""
    ctl = one_node_controller(tmp_path, clock)
    job, _, task = _cancelled_with_a_step_left(ctl, TestClient(create_app(ctl)))
    ctl.persist.close()
    again = _controller(tmp_path, clock)
    assert _row(again, job, task).state is JobState.RUNNING
    return again, job, task


def test_after_a_restart_a_dying_task_no_beat_lists_is_written_lost(
    tmp_path: Path, clock: Clock
) -> None:
    ctl, job, task = _restarted_while_a_step_dies(tmp_path, clock)
    try:
        ctl.register(_inventory("n0"))
        ctl.heartbeat(Heartbeat(node="n0", running=[]), wait_s=0)
        row = _row(ctl, job, task)
        assert (row.state, row.exit_code) == (JobState.FAILED, -1)
        assert row.end_time is not None
        assert not ctl.outliving
    finally:
        ctl.persist.close()


def test_after_a_restart_a_dying_task_s_exit_is_written(tmp_path: Path, clock: Clock) -> None:
    ctl, job, task = _restarted_while_a_step_dies(tmp_path, clock)
    try:
        ctl.register(_inventory("n0", [TaskLaunch(task_id=task, job_id=job)]))
        kills = ctl.heartbeat(Heartbeat(node="n0", running=[task]), wait_s=0).kill
        assert task in {k.task_id for k in kills}  # (listed: not lost, and not ours to run)
        assert _row(ctl, job, task).state is JobState.RUNNING
        end(ctl, {task: -9}, [])
        row = _row(ctl, job, task)
        assert (row.state, row.exit_code) == (JobState.FAILED, -9)
    finally:
        ctl.persist.close()


def test_a_job_requeued_for_a_node_not_back_gives_its_own_tasks_cpu_ids_back(
    tmp_path: Path, clock: Clock
) -> None:
    ctl = _controller(tmp_path, clock)
    ctl.register(_inventory("n0"))
    ctl.register(_inventory("n1"))
    request = parse_sbatch("#!/bin/sh\nsleep 100\n", args=["-N", "2", "-c", "2"]).request
    (job,) = ctl.submit([request])
    ctl.run_cycle()
    (launch,) = ctl.heartbeat(Heartbeat(node="n0", running=[]), wait_s=0).launch
    assert launch.cpu_ids
    ctl.persist.close()
    again = _controller(tmp_path, clock)
    try:
        again.register(_inventory("n0", [launch]))
        assert not set(launch.cpu_ids) & set(again.nodes["n0"].pool.cpu_free)
        clock.now += again.config.node_timeout_s + 1
        again.heartbeat(Heartbeat(node="n0", running=[launch.task_id]), wait_s=0)
        again._check_nodes()  # n1 is not back: the job is requeued
        assert not again.jobs[job].tasks
        assert again.outliving[launch.task_id].lost  # (its exit, when it comes, is written)
        assert again.nodes["n0"].pool.cpu_free == [2, 3]  # (its own until it is gone)
        again.heartbeat(Heartbeat(node="n0", running=[]), wait_s=0)  # (killed at once)
        assert again.nodes["n0"].pool.cpu_free == [0, 1, 2, 3]
    finally:
        again.persist.close()


def test_a_late_exit_past_the_recently_finished_is_written(
    ctl: Controller, client: TestClient
) -> None:
    job, _, task = _cancelled_with_a_step_left(ctl, client)
    del ctl.finished[task]  # (10,000 tasks of other jobs ended since)
    end(ctl, {task: -9}, [])
    row = _row(ctl, job, task)
    assert (row.state, row.exit_code) == (JobState.FAILED, -9)


def test_a_task_past_the_cap_is_written_lost_not_left_running(
    ctl: Controller, client: TestClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(late_exits, "MAX_KEPT", 0)
    job, _, task = _cancelled_with_a_step_left(ctl, client)
    assert not ctl.outliving
    row = _row(ctl, job, task)
    assert (row.state, row.exit_code) == (JobState.FAILED, -1)
    kills = ctl.heartbeat(Heartbeat(node="n0", running=[task]), wait_s=0).kill
    assert task in {k.task_id for k in kills}  # fenced should it still run


def test_a_run_after_a_restart_in_place_takes_new_task_ids(
    ctl: Controller, client: TestClient
) -> None:
    job = service(client, always=True, max_restarts=5)
    first, second = (t.task_id for t in launched(ctl, []))
    exits(ctl, first, 0, [second])
    exits(ctl, second, -15, [])
    again = [t.task_id for t in relaunch(ctl, Clock(), [])]
    assert again == [f"{job}-r1.main.0", f"{job}-r1.main.1"]
    beat(ctl, again)
    assert client.post(f"/v1/jobs/{job}/requeue", json={}).status_code == 200
    ctl.run_cycle()
    end(ctl, dict.fromkeys(again, -15), [])
    ctl.run_cycle()
    ctl.run_cycle()
    third = [t.task_id for t in ctl.heartbeat(Heartbeat(node="n0", running=[]), wait_s=0).launch]
    assert third == [f"{job}-r2.main.0", f"{job}-r2.main.1"]


def test_a_job_s_step_after_a_restart_takes_a_new_task_id(tmp_path: Path, clock: Clock) -> None:
    ctl = one_node_controller(tmp_path, clock)
    client = TestClient(create_app(ctl))
    (job,) = ctl.submit([parse_sbatch("#!/bin/sh\nsleep 60\n", args=["-n", "2"]).request])
    ctl.run_cycle()
    (batch,) = beat(ctl, [])
    (done,) = step(client, job, 1)
    beat(ctl, [batch.task_id])
    end(ctl, {done: 0}, [batch.task_id])
    ctl.persist.close()
    again = _controller(tmp_path, clock)
    try:
        again.register(_inventory("n0", [batch]))
        again.run_cycle()
        report = TaskReport(task_id=batch.task_id, state=TaskState.RUNNING, pid=7)
        again.heartbeat(Heartbeat(node="n0", running=[batch.task_id], reports=[report]), wait_s=0)
        (fresh,) = step(TestClient(create_app(again)), job, 1)
        assert fresh != done
        assert _row(again, job, done).exit_code == 0  # (not taken over by the new one)
    finally:
        again.persist.close()


def test_a_requeued_job_s_running_step_is_adopted_after_a_restart(
    tmp_path: Path, clock: Clock
) -> None:
    ctl = one_node_controller(tmp_path, clock)
    client = TestClient(create_app(ctl))
    (job,) = ctl.submit([parse_sbatch("#!/bin/sh\nsleep 60\n", args=["-n", "2"]).request])
    ctl.run_cycle()
    (first,) = beat(ctl, [])
    assert client.post(f"/v1/jobs/{job}/requeue", json={}).status_code == 200
    ctl.run_cycle()
    clock.now += 1
    end(ctl, {first.task_id: -15}, [])
    ctl.run_cycle()
    ctl.run_cycle()
    (batch,) = beat(ctl, [])
    assert "-r1." in batch.task_id
    (task,) = step(client, job, 1)
    (launch,) = beat(ctl, [batch.task_id])
    ctl.persist.close()
    again = _controller(tmp_path, clock)
    try:
        assert task in again.jobs[job].tasks  # (its id names no run: started in this one)
        again.register(_inventory("n0", [batch, launch]))
        again.run_cycle()
        kills = again.heartbeat(Heartbeat(node="n0", running=[batch.task_id, task]), wait_s=0).kill
        assert not kills
    finally:
        again.persist.close()
