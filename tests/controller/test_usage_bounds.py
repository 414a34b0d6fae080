"""Usage readings that cannot be real never reach the store, a change the store cannot hold
does not wedge it, a report says when a task's usage was counted only since a controller
restart, and a batch script's one task is credited its group's whole allocation."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from tests.builders import Clock
from tests.controller.conftest import ONE_NODE, one_node_controller
from tests.controller.test_task_usage import beat, start_job, stored_task

from fusesched.api.app import create_app
from fusesched.api.efficiency import job_efficiency
from fusesched.api.wire import Heartbeat, NodeInventory, TaskSampleWire
from fusesched.controller.logs import LogStore
from fusesched.controller.persist import Persistence
from fusesched.controller.service import Controller
from fusesched.controller.task_usage import MAX_BYTES, UsageTally
from fusesched.store.records import JobDetail, JobRow, JobState, TaskChange, TaskRow
from fusesched.submit.request import JobRequest

MiB = 1024 * 1024


def sample(t: float, **values: object) -> TaskSampleWire:
    return TaskSampleWire.model_validate({"task_id": "7.main.0", "time": t} | values)


@pytest.mark.parametrize(
    "bad",
    [
        {"rss_bytes": 2**63},
        {"rss_bytes": MAX_BYTES + 1},
        {"rss_bytes": -5},
        {"gpu_memory_bytes": 2**64},
        {"gpu_util_mean": 1e308},
        {"gpu_util_mean": 101.0},
        {"cpu_seconds": 1e300},
        {"cpu_seconds": -3.0},
    ],
)
def test_a_reading_that_cannot_be_real_is_dropped(bad: dict[str, object]) -> None:
    tally = UsageTally()
    tally.add(sample(1.0, cpu_seconds=2.0, rss_bytes=10 * MiB, gpu_util_mean=50.0))
    tally.add(sample(2.0, **({"cpu_seconds": 3.0} | bad)))
    tally.add(sample(3.0, cpu_seconds=4.0, rss_bytes=MiB, gpu_util_mean=50.0))
    usage = tally.usage()
    assert usage.max_rss_bytes == 10 * MiB
    assert usage.max_gpu_memory_bytes is None
    assert usage.gpu_util_mean == pytest.approx(50.0)
    assert usage.cpu_seconds == 4.0  # the bad reading neither adds nor resets anything


def test_a_huge_sample_neither_reaches_nor_wedges_the_store(
    ctl: Controller, client: TestClient, clock: Clock
) -> None:
    job_id, task_id = start_job(ctl, {"cpu": "1", "memory": "1Gi"})
    at = clock.now
    huge = TaskSampleWire(
        task_id=task_id, time=at + 1, cpu_seconds=1.0, rss_bytes=2**63, gpu_memory_bytes=2**63
    )
    clock.now = at + 11
    fine = TaskSampleWire(task_id=task_id, time=at + 11, cpu_seconds=2.0, rss_bytes=5 * MiB)
    beat(ctl, task_id, huge, fine)
    beat(ctl, task_id, exited=True)  # the task's end writes its usage
    row = stored_task(ctl, task_id)
    assert (row.cpu_seconds, row.max_rss_bytes, row.max_gpu_memory_bytes) == (2.0, 5 * MiB, None)
    # the store still takes every later change: a new job runs and ends
    ctl.run_cycle()
    request = {"name": "o", "groups": [{"resources": {"cpu": "1"}, "argv": ["true"]}]}
    (other,) = ctl.submit([JobRequest.model_validate(request)])
    ctl.run_cycle()
    ctl.heartbeat(Heartbeat(node="n0", running=[]), wait_s=0)
    assert ctl.persist.get_job(job_id).state == "Completed"  # type: ignore[union-attr]
    assert ctl.persist.get_job(other).state == "Running"  # type: ignore[union-attr]
    assert client.get(f"/v1/jobs/{job_id}/efficiency").json()["max_rss_bytes"] == 5 * MiB


def test_a_change_the_store_cannot_hold_is_dropped_and_later_ones_are_written(
    ctl: Controller,
) -> None:
    job_id, task_id = start_job(ctl, {"cpu": "1"})
    ctl.persist.flush()
    # past the guards of task_usage (as a future caller might be): an integer beyond 64 bits
    ctl.persist._task_changes.append(TaskChange(task_id, max_rss_bytes=2**63))
    ctl.persist.flush()  # refused, logged and dropped: not kept for the next flush
    ctl.persist._task_changes.append(TaskChange(task_id, cpu_seconds=3.0))
    ctl.persist.flush()
    row = stored_task(ctl, task_id)
    assert (row.cpu_seconds, row.max_rss_bytes) == (3.0, None)
    assert not ctl.persist._task_changes and ctl.persist.job_exists(job_id)


# ---------------------------------------------------------------------- a controller restart


def test_a_restart_says_the_peaks_cover_only_the_time_since(tmp_path: Path, clock: Clock) -> None:
    first = one_node_controller(tmp_path, clock)
    job_id, task_id = start_job(first, {"cpu": "1", "memory": "1Gi"})
    at = clock.now
    clock.now = at + 10
    big = TaskSampleWire(task_id=task_id, time=clock.now, cpu_seconds=10.0, rss_bytes=900 * MiB)
    beat(first, task_id, big)
    first.persist.flush()
    (launch,) = [t.launch for t in first.jobs[job_id].tasks.values()]
    first.persist.close()

    clock.now = at + 500  # a new controller: the tally of the running task starts afresh
    second = Controller(
        Persistence(f"sqlite:///{tmp_path / 'db.sqlite'}"),
        LogStore(tmp_path / "logs2"),
        clock=clock,
    )
    try:
        inventory = dict(ONE_NODE) | {"running": [launch.model_dump()]}
        second.register(NodeInventory.model_validate(inventory))
        clock.now = at + 510
        small = TaskSampleWire(task_id=task_id, time=clock.now, cpu_seconds=20.0, rss_bytes=MiB)
        beat(second, task_id, small)
        second.run_cycle()
        client = TestClient(create_app(second), raise_server_exceptions=False)
        found = client.get(f"/v1/jobs/{job_id}/efficiency").json()
        assert found["cpu_seconds"] == 20.0  # the agent's counter: complete
        assert found["max_rss_bytes"] == MiB  # the peak before the restart is lost...
        (note,) = [n for n in found["notes"] if "since the controller restarted" in n]
        assert task_id in note and "peak memory" in note  # ... and the report says so
    finally:
        second.persist.close()


def test_no_restart_note_for_a_task_sampled_from_its_start(
    ctl: Controller, client: TestClient, clock: Clock
) -> None:
    job_id, task_id = start_job(ctl, {"cpu": "1"})
    clock.now += 10
    beat(ctl, task_id, TaskSampleWire(task_id=task_id, time=clock.now, cpu_seconds=1.0))
    clock.now += 1000
    beat(ctl, task_id, TaskSampleWire(task_id=task_id, time=clock.now, cpu_seconds=2.0))
    notes = client.get(f"/v1/jobs/{job_id}/efficiency").json()["notes"]
    assert not any("restarted" in n for n in notes)


# ---------------------------------------------------------------------- batch-script jobs


def test_a_batch_script_task_stands_for_its_whole_group() -> None:
    request = {"groups": [{"replicas": 2, "resources": {"cpu": "4", "memory": "1Gi"}}]}
    job = JobRow(
        id="7",
        seq=7,
        user="u",
        state=JobState.COMPLETED,
        phase="completed",
        submit_time=0.0,
        request=request,
        start_time=100.0,
        end_time=200.0,
    )
    times = {"state": JobState.COMPLETED, "start_time": 100.0, "end_time": 200.0}
    script = TaskRow(task_id="7.main.0", job_id="7", group="main", index=0, **times)
    script = replace(script, cpu_seconds=700.0, max_rss_bytes=1024 * MiB)
    helper = TaskRow(task_id="7.remote.1", job_id="7", group="remote", index=1, **times)
    found = job_efficiency(JobDetail(job, (script, replace(helper, cpu_seconds=50.0))), {}, 300.0)
    (mine,) = [t for t in found.tasks if t.task_id == "7.main.0"]
    # the script's one task is credited the group's 8 cores, not one replica's 4 (175 %)
    assert (mine.cpus, mine.cpu_efficiency_pct) == (8.0, 87.5)
    assert mine.memory_bytes == 2048 * MiB and mine.memory_efficiency_pct == 50.0
    assert found.cpus == 8.0 and found.cpu_efficiency_pct == 93.75  # helpers count in the job
    # per task (one row per replica): one replica's share each
    second = replace(script, task_id="7.main.1", index=1, cpu_seconds=300.0)
    each = job_efficiency(JobDetail(job, (script, second)), {}, 300.0).tasks
    assert [t.cpus for t in each] == [4.0, 4.0]
