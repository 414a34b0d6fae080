"""Slurm's COMPLETING (controller/completing.py): a job that ends while a task of its step
still runs (it ignores SIGTERM) keeps its booking on that node, and the task its CPU ids,
until the task has exited, is written lost, or the time-out is over; a restarted controller
keeps such a node draining until the task is gone. The agent is played by hand."""

from __future__ import annotations

from pathlib import Path

from fastapi.testclient import TestClient
from tests.builders import Clock
from tests.controller.test_late_exits import _cancelled_with_a_step_left
from tests.controller.test_late_exits_restart import _inventory, _restarted_while_a_step_dies
from tests.controller.test_step_accounting import end, step
from tests.controller.test_step_route import beat

from fusesched.api.wire import TaskLaunch
from fusesched.controller import drains, failures
from fusesched.controller.hang import Failure, FailureKind
from fusesched.controller.power import PowerConfig, PowerManager
from fusesched.controller.service import Controller
from fusesched.model.node import NodeState
from fusesched.submit.sbatch import parse_sbatch

WHOLE_NODE = ["-n", "4"]  # (n0 has 4 CPUs; the cancelled job booked 2)


def _submit(ctl: Controller, args: list[str]) -> str:
    (job,) = ctl.submit([parse_sbatch("#!/bin/sh\nsleep 60\n", args=args).request])
    ctl.run_cycle()
    return job


def _launched(ctl: Controller, running: list[str]) -> list[TaskLaunch]:
    ctl.run_cycle()
    return beat(ctl, running)


def test_a_job_waits_for_the_step_task_that_outlives_the_job_on_its_node(
    ctl: Controller, client: TestClient
) -> None:
    job, _, task = _cancelled_with_a_step_left(ctl, client)
    assert ctl.core.jobs[job].end_time is not None  # (the job has ended: its end is now)
    nxt = _submit(ctl, WHOLE_NODE)
    assert _launched(ctl, [task]) == []  # (its CPUs are still the cancelled job's)
    assert client.get("/v1/nodes").json()[0]["free"]["cpu"] == "2"
    end(ctl, {task: -9}, [])  # SIGKILLed after the grace
    (launch,) = _launched(ctl, [])
    assert launch.job_id == nxt
    assert not ctl.core.completing


def test_the_step_task_s_cpu_ids_go_to_no_other_job_until_it_is_gone(
    ctl: Controller, client: TestClient
) -> None:
    task = _cancelled_with_a_step_left(ctl, client)[2]
    held = set(ctl.outliving[task].grant.cpu_ids)
    assert held
    _submit(ctl, ["-n", "1"])  # (fits beside the held booking)
    (launch,) = _launched(ctl, [task])
    assert launch.cpu_ids and not held & set(launch.cpu_ids)
    end(ctl, {task: -9}, [launch.task_id])
    assert held <= set(ctl.nodes["n0"].pool.cpu_free)


def test_a_lost_step_task_frees_its_job_s_node(ctl: Controller, client: TestClient) -> None:
    _cancelled_with_a_step_left(ctl, client)
    nxt = _submit(ctl, WHOLE_NODE)
    end(ctl, {}, [])  # (its agent lists it no more)
    (launch,) = _launched(ctl, [])
    assert launch.job_id == nxt


def test_a_node_held_past_the_time_out_is_freed_anyway(
    ctl: Controller, client: TestClient, clock: Clock
) -> None:
    job, _, task = _cancelled_with_a_step_left(ctl, client)
    nxt = _submit(ctl, WHOLE_NODE)
    clock.now += ctl.config.completing_timeout_s - 1
    assert _launched(ctl, [task]) == []
    clock.now += 1
    (launch,) = _launched(ctl, [task])
    assert launch.job_id == nxt
    ctl.persist.flush()
    kinds = [e.event.kind for e in ctl.persist.store.events_for_job(job)]
    assert "CompletingTimeout" in kinds, kinds
    assert task in ctl.outliving  # (still waited for: its end is written when it comes)


def test_after_a_restart_a_node_with_a_dying_task_takes_nothing_new_until_it_is_gone(
    tmp_path: Path, clock: Clock
) -> None:
    ctl, job, task = _restarted_while_a_step_dies(tmp_path, clock)
    try:
        ctl.register(_inventory("n0", [TaskLaunch(task_id=task, job_id=job, cpu_ids=[0])]))
        assert ctl.nodes["n0"].state is NodeState.DRAINING
        assert 0 not in ctl.nodes["n0"].pool.cpu_free
        nxt = _submit(ctl, WHOLE_NODE)
        assert _launched(ctl, [task]) == []
        end(ctl, {task: -9}, [])
        (launch,) = _launched(ctl, [])
        assert ctl.nodes["n0"].state is NodeState.UP
        assert launch.job_id == nxt and 0 in launch.cpu_ids
    finally:
        ctl.persist.close()


def _restarted_in_place_with_a_step_left(ctl: Controller, client: TestClient) -> tuple[str, str]:
    """A batch job restarted in place (a hang) whose step task, pinned to its script's CPU
    ids, outlives the old run: (the step's task id, the new script's task id)."""
    request = parse_sbatch("#!/bin/sh\nsleep 60\n", args=["-n", "2"]).request
    restart = request.restart.model_copy(update={"mode": "restart-in-place", "backoff_s": 0})
    (job,) = ctl.submit([request.model_copy(update={"restart": restart})])
    ctl.run_cycle()
    (batch,) = beat(ctl, [])
    (task,) = step(client, job, 1)
    (launch,) = beat(ctl, [batch.task_id])
    assert launch.cpu_ids == batch.cpu_ids  # (a step takes its script's CPU ids first)
    with ctl.work:
        failures.job_failed(ctl, ctl.jobs[job], Failure(FailureKind.HANG, None, "hung"), 0.0)
    end(ctl, {batch.task_id: -15}, [task])  # (the step ignores SIGTERM)
    with ctl.work:
        failures.relaunch_due(ctl, 1.0)
    (fresh,) = beat(ctl, [task])
    assert fresh.cpu_ids == batch.cpu_ids and task in ctl.outliving
    return task, fresh.task_id


def test_the_old_run_s_step_task_frees_none_of_the_cpu_ids_the_new_run_holds(
    ctl: Controller, client: TestClient
) -> None:
    task, fresh = _restarted_in_place_with_a_step_left(ctl, client)
    pinned = set(ctl.jobs[ctl.tasks[fresh][0]].tasks[fresh].grant.cpu_ids)
    end(ctl, {task: -9}, [fresh])
    assert not pinned & set(ctl.nodes["n0"].pool.cpu_free)


def test_the_new_run_s_script_frees_none_of_the_cpu_ids_the_old_step_task_holds(
    ctl: Controller, client: TestClient
) -> None:
    task, fresh = _restarted_in_place_with_a_step_left(ctl, client)
    pinned = set(ctl.outliving[task].grant.cpu_ids)
    end(ctl, {fresh: 1}, [task])
    assert not pinned & set(ctl.nodes["n0"].pool.cpu_free)
    end(ctl, {task: -9}, [])
    assert pinned <= set(ctl.nodes["n0"].pool.cpu_free)


def test_power_saving_suspends_no_node_an_ended_job_still_holds(
    ctl: Controller, client: TestClient, clock: Clock
) -> None:
    _cancelled_with_a_step_left(ctl, client)
    settings = {"suspend": ["true"], "resume": ["true"], "idle_threshold_s": 1, "interval_s": 1}
    ctl.power = PowerManager(PowerConfig.parse(settings))
    for _ in range(3):  # (idle since the first look, long past the threshold at the last)
        clock.now += 10
        with ctl.lock:
            ctl.power.tick(ctl, clock.now)
    assert ctl.nodes["n0"].state is NodeState.UP


def test_after_a_restart_a_drained_node_stays_drained_once_its_dying_task_is_gone(
    tmp_path: Path, clock: Clock
) -> None:
    ctl, job, task = _restarted_while_a_step_dies(tmp_path, clock)
    try:
        drains.drain(ctl, "n0", "disk replacement")  # (while its agent is not back)
        ctl.register(_inventory("n0", [TaskLaunch(task_id=task, job_id=job, cpu_ids=[0])]))
        end(ctl, {task: -9}, [])
        ctl.run_cycle()
        assert not ctl.adopt_held and ctl.nodes["n0"].state is NodeState.DRAINING
    finally:
        ctl.persist.close()
