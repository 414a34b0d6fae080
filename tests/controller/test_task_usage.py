"""Task usage for efficiency reports: the tally of one task's samples, the controller feeding
it from heartbeats and writing it when the task ends (and only then), the report built from
it (``GET /v1/jobs/{id}/efficiency``), and the CLI's block."""

from __future__ import annotations

from typing import Any

import pytest
from fastapi.testclient import TestClient
from tests.builders import Clock

from fusesched.api.efficiency import job_efficiency
from fusesched.api.wire import Heartbeat, TaskReport, TaskSampleWire, TaskState
from fusesched.cli.efficiency import clock, report, size, summary
from fusesched.controller.service import Controller
from fusesched.controller.task_usage import MAX_GAP_S, TaskUsage, UsageBook, UsageTally, usage_for
from fusesched.store.records import JobDetail, JobRow, JobState, TaskRow
from fusesched.submit.request import JobRequest

MiB = 1024 * 1024


def sample(t: float, cpu: float = 0.0, rss: int = 0, **extra: Any) -> TaskSampleWire:
    return TaskSampleWire(task_id="7.main.0", time=t, cpu_seconds=cpu, rss_bytes=rss, **extra)


# ---------------------------------------------------------------------- one task's tally


def test_cpu_is_the_newest_counter_and_memory_the_peak() -> None:
    tally = UsageTally()
    assert tally.usage() == TaskUsage() and not tally.usage().sampled
    for t, cpu, rss in ((1.0, 0.5, 10 * MiB), (2.0, 1.5, 300 * MiB), (3.0, 2.5, 20 * MiB)):
        assert tally.add(sample(t, cpu, rss))
    usage = tally.usage()
    assert usage.cpu_seconds == 2.5
    assert usage.max_rss_bytes == 300 * MiB
    assert usage.samples == 3 and usage.sampled
    assert usage.gpu_util_mean is None and usage.max_gpu_memory_bytes is None


def test_a_repeated_or_older_sample_is_ignored() -> None:
    tally = UsageTally()
    tally.add(sample(5.0, 4.0, 1))
    assert not tally.add(sample(5.0, 9.0, 999))  # the same beat sent again
    assert not tally.add(sample(4.0, 9.0, 999))
    assert tally.usage().cpu_seconds == 4.0 and tally.usage().max_rss_bytes == 1


def test_a_counter_that_restarts_from_zero_adds_to_what_was_counted() -> None:
    tally = UsageTally()
    tally.add(sample(1.0, 3.0, 50 * MiB))
    tally.add(sample(2.0, 5.0, 60 * MiB))
    tally.add(sample(3.0, 1.0, 10 * MiB))  # the task's processes started afresh
    tally.add(sample(4.0, 2.0, 20 * MiB))
    usage = tally.usage()
    assert usage.cpu_seconds == 7.0  # 5 before the restart, 2 after
    assert usage.max_rss_bytes == 60 * MiB  # the peak before the restart is kept


def test_gpu_utilisation_is_weighted_by_time() -> None:
    tally = UsageTally()
    tally.add(sample(0.0, gpu_util_mean=100.0, gpu_memory_bytes=5 * MiB))
    tally.add(sample(10.0, gpu_util_mean=0.0, gpu_memory_bytes=9 * MiB))  # 10 s at 0 %
    tally.add(sample(40.0, gpu_util_mean=50.0, gpu_memory_bytes=1 * MiB))  # 30 s at 50 %
    usage = tally.usage()
    assert usage.gpu_util_mean == pytest.approx((10 * 0.0 + 30 * 50.0) / 40)
    assert usage.max_gpu_memory_bytes == 9 * MiB


def test_gpu_mean_of_one_reading_skipped_readings_and_long_gaps() -> None:
    one = UsageTally()
    one.add(sample(3.0, gpu_util_mean=42.0))
    assert one.usage().gpu_util_mean == 42.0
    gaps = UsageTally()
    gaps.add(sample(0.0, gpu_util_mean=10.0))
    gaps.add(sample(10.0))  # no reading: weighs nothing
    gaps.add(sample(20.0, gpu_util_mean=20.0))  # 10 s since the previous sample
    gaps.add(sample(20.0 + 10 * MAX_GAP_S, gpu_util_mean=80.0))  # a silent node: capped
    expected = (10 * 20.0 + MAX_GAP_S * 80.0) / (10 + MAX_GAP_S)
    assert gaps.usage().gpu_util_mean == pytest.approx(expected)
    none = UsageTally()
    none.add(sample(1.0))
    assert none.usage().gpu_util_mean is None


def test_the_book_forgets_ended_tasks() -> None:
    book = UsageBook()
    for task_id in ("1.main.0", "2.main.0", "3.main.0"):
        book.add(TaskSampleWire(task_id=task_id, time=1.0, cpu_seconds=1.0))
    # no sample saw resident memory: its peak is unknown, not 0
    assert book.pop("1.main.0") == TaskUsage(cpu_seconds=1.0, max_rss_bytes=None, samples=1)
    assert book.pop("1.main.0") is None
    book.prune({"3.main.0"})
    assert len(book) == 1 and book.get("2.main.0") is None and book.get("3.main.0") is not None


# ---------------------------------------------------------------------- in the controller


def start_job(ctl: Controller, resources: dict[str, Any]) -> tuple[str, str]:
    request = {"name": "eff", "groups": [{"resources": resources, "argv": ["true"]}]}
    (job_id,) = ctl.submit([JobRequest.model_validate(request)])
    ctl.run_cycle()
    (launch,) = ctl.heartbeat(Heartbeat(node="n0", running=[]), wait_s=0).launch
    running = TaskReport(task_id=launch.task_id, state=TaskState.RUNNING, pid=4242)
    ctl.heartbeat(Heartbeat(node="n0", running=[launch.task_id], reports=[running]), wait_s=0)
    return job_id, launch.task_id


def beat(ctl: Controller, task_id: str, *samples: TaskSampleWire, exited: bool = False) -> None:
    reports = [TaskReport(task_id=task_id, state=TaskState.EXITED, exit_code=0)] if exited else []
    running = [] if exited else [task_id]
    ctl.heartbeat(
        Heartbeat(node="n0", running=running, reports=reports, samples=list(samples)), wait_s=0
    )


def stored_task(ctl: Controller, task_id: str) -> TaskRow:
    (row,) = [t for t in ctl.persist.store.tasks_for_job(task_id.split(".")[0])]
    return row


def test_usage_stays_in_memory_while_running_and_is_written_at_the_end(
    ctl: Controller, client: TestClient, clock: Clock
) -> None:
    job_id, task_id = start_job(ctl, {"cpu": "2", "memory": "1Gi"})
    at = clock.now
    for i, (cpu, rss) in enumerate(((1.0, 100 * MiB), (9.0, 400 * MiB), (19.0, 200 * MiB))):
        clock.now = at + 5.0 * (i + 1)
        one = TaskSampleWire(
            task_id=task_id, time=at + 5.0 * (i + 1), cpu_seconds=cpu, rss_bytes=rss
        )
        other = TaskSampleWire(task_id="999.main.0", time=clock.now, cpu_seconds=50.0)
        beat(ctl, task_id, one, other)  # another node's or an unknown task's: ignored
    # nothing written per heartbeat: the row is as the task's start wrote it
    assert stored_task(ctl, task_id).cpu_seconds is None
    live = client.get(f"/v1/jobs/{job_id}/efficiency").json()
    assert live["state"] == "Running" and live["tasks"][0]["live"] is True
    assert live["cpu_seconds"] == 19.0 and live["max_rss_bytes"] == 400 * MiB
    assert live["cpus"] == 2 and live["elapsed_s"] == 15.0
    assert live["cpu_efficiency_pct"] == pytest.approx(100 * 19.0 / (15.0 * 2), abs=0.01)
    assert live["memory_efficiency_pct"] == pytest.approx(100 * 400 / 1024, abs=0.01)
    assert "999.main.0" not in [t["task_id"] for t in live["tasks"]]
    assert len(usage_for(ctl)) == 1

    clock.now += 5.0
    last = TaskSampleWire(task_id=task_id, time=clock.now, cpu_seconds=24.0, rss_bytes=MiB)
    beat(ctl, task_id, last, exited=True)  # the last sample comes with the exit
    row = stored_task(ctl, task_id)
    assert (row.cpu_seconds, row.max_rss_bytes) == (24.0, 400 * MiB)
    assert row.gpu_util_mean is None and row.max_gpu_memory_bytes is None
    assert len(usage_for(ctl)) == 0  # forgotten once written
    late = TaskSampleWire(task_id=task_id, time=clock.now + 1, cpu_seconds=99.0)
    beat(ctl, task_id, late, exited=True)  # too late: ignored
    assert len(usage_for(ctl)) == 0 and stored_task(ctl, task_id).cpu_seconds == 24.0
    ctl.run_cycle()
    ended = client.get(f"/v1/jobs/{job_id}/efficiency").json()
    assert ended["state"] == "Completed" and ended["tasks"][0]["live"] is False
    assert ended["cpu_seconds"] == 24.0 and ended["notes"] == []


def test_a_task_whose_samples_saw_no_memory_has_no_peak_and_says_so(
    ctl: Controller, client: TestClient, clock: Clock
) -> None:
    """Only the exit's final sample, of a zombie (no resident memory) and without the
    kernel's peak: the peak is unknown (`-`), not 0 B, and the notes say why."""
    job_id, task_id = start_job(ctl, {"cpu": "1", "memory": "1Gi"})
    clock.now += 2.0
    final = TaskSampleWire(task_id=task_id, time=clock.now, cpu_seconds=1.5, rss_bytes=0)
    beat(ctl, task_id, final, exited=True)
    ctl.run_cycle()
    assert stored_task(ctl, task_id).max_rss_bytes is None
    found = client.get(f"/v1/jobs/{job_id}/efficiency").json()
    assert found["cpu_seconds"] == 1.5 and found["max_rss_bytes"] is None
    assert found["memory_efficiency_pct"] is None
    assert any(note.startswith("memory peak not measured") for note in found["notes"]), found


def test_a_task_never_sampled_writes_nothing_and_says_so(
    ctl: Controller, client: TestClient
) -> None:
    job_id, task_id = start_job(ctl, {"cpu": "1"})
    beat(ctl, task_id, exited=True)
    ctl.run_cycle()
    assert stored_task(ctl, task_id).cpu_seconds is None
    found = client.get(f"/v1/jobs/{job_id}/efficiency").json()
    assert found["sampled"] is False and found["cpu_seconds"] is None
    assert found["cpu_efficiency_pct"] is None and found["memory_bytes"] is None
    assert "not sampled" in found["notes"][0] and "sample_interval_s" in found["notes"][0]


def test_unknown_job_is_404(client: TestClient) -> None:
    answer = client.get("/v1/jobs/12345/efficiency")
    assert answer.status_code == 404 and "no job '12345'" in answer.text


# ---------------------------------------------------------------------- the report


def row(**extra: Any) -> JobRow:
    request = {
        "name": "r",
        "groups": [
            {"name": "main", "replicas": 2, "resources": {"cpu": "4", "memory": "8Gi", "gpu": 1}},
            {"name": "aux", "resources": {"cpu": "500m"}},
        ],
    }
    values: dict[str, Any] = {
        "id": "7",
        "seq": 7,
        "user": "u",
        "state": JobState.COMPLETED,
        "phase": "completed",
        "submit_time": 0.0,
        "request": request,
        "start_time": 100.0,
        "end_time": 200.0,
    }
    return JobRow(**(values | extra))


def task(task_id: str, **extra: Any) -> TaskRow:
    _, group, index = task_id.split(".")
    values = {"state": JobState.COMPLETED, "start_time": 100.0, "end_time": 200.0}
    return TaskRow(task_id=task_id, job_id="7", group=group, index=int(index), **(values | extra))


def test_the_report_sums_tasks_and_allocations() -> None:
    tasks = (
        task("7.aux.0", cpu_seconds=5.0, max_rss_bytes=MiB),
        task("7.main.0", cpu_seconds=400.0, max_rss_bytes=2 * 1024 * MiB, gpu_util_mean=90.0),
        task("7.main.1", start_time=150.0, cpu_seconds=95.0, gpu_util_mean=30.0),
        task("7.remote.1", cpu_seconds=10.0, max_rss_bytes=MiB),  # an orted: no allocation
        task("7.main.9", start_time=10.0, end_time=50.0, cpu_seconds=1e6),  # an earlier run
    )
    e = job_efficiency(JobDetail(row(), tasks), {}, now=999.0)
    assert (e.cpus, e.gpus, e.tasks_count) == (8.5, 2.0, 3)
    assert e.memory_bytes == 16 * 1024 * MiB
    assert e.elapsed_s == 100.0
    assert e.cpu_seconds == 510.0  # the earlier run's task is left out
    assert e.cpu_efficiency_pct == pytest.approx(100 * 510 / (100 * 8.5), abs=0.01)
    assert e.max_rss_bytes == 2 * 1024 * MiB + 2 * MiB
    # main.0 ran 100 s, main.1 50 s, one GPU each
    assert e.gpu_util_mean == pytest.approx((90.0 * 100 + 30.0 * 50) / 150, abs=0.01)
    assert any("1 task(s) of earlier runs" in n for n in e.notes)
    by_id = {t.task_id: t for t in e.tasks}
    assert by_id["7.main.1"].cpu_efficiency_pct == pytest.approx(100 * 95 / (50 * 4), abs=0.01)
    assert by_id["7.remote.1"].cpus is None and by_id["7.remote.1"].cpu_efficiency_pct is None
    assert by_id["7.aux.0"].memory_bytes is None  # none requested


def test_the_report_of_jobs_not_measured() -> None:
    waiting = job_efficiency(
        JobDetail(row(state=JobState.PENDING, phase="queued", start_time=None, end_time=None)),
        {},
        now=999.0,
    )
    assert waiting.elapsed_s is None and waiting.cpu_seconds is None and not waiting.tasks
    assert waiting.notes == ["the job has not started (it waits): nothing used yet"]
    cancelled = job_efficiency(
        JobDetail(row(state=JobState.CANCELLED, start_time=None)), {}, now=999.0
    )
    assert "never ran" in cancelled.notes[0]
    pooled = job_efficiency(
        JobDetail(row(pool="hpc"), (task("7.main.0"),)), {}, now=999.0, external_pools={"hpc"}
    )
    assert pooled.cpu_seconds is None and "external pool 'hpc'" in pooled.notes[0]
    handed = job_efficiency(
        JobDetail(row(pool="hpc"), (task("7.main.0", external_id="5501"),)), {}, now=999.0
    )
    assert "external pool 'hpc'" in handed.notes[0]  # known after a restart too
    local = job_efficiency(JobDetail(row(pool="cpu"), (task("7.main.0"),)), {}, now=999.0)
    assert "not sampled: its agents' sampling is off" in local.notes[0]
    partial = job_efficiency(
        JobDetail(row(), (task("7.main.0", cpu_seconds=1.0), task("7.main.1"))), {}, now=999.0
    )
    assert partial.cpu_seconds == 1.0
    assert "1 of 2 tasks not sampled" in partial.notes[0]
    assert any("GPU utilisation not reported" in n for n in partial.notes)
    unreadable = job_efficiency(JobDetail(row(request={"groups": "?"})), {}, now=999.0)
    assert unreadable.cpus == 0 and "could not be read" in unreadable.notes[0]


def test_running_tasks_take_their_live_values() -> None:
    running = row(state=JobState.RUNNING, phase="running", end_time=None)
    tasks = (task("7.main.0", state=JobState.RUNNING, end_time=None),)
    live = {"7.main.0": TaskUsage(cpu_seconds=30.0, max_rss_bytes=MiB, samples=2)}
    e = job_efficiency(JobDetail(running, tasks), live, now=110.0)
    assert e.elapsed_s == 10.0 and e.cpu_seconds == 30.0 and e.tasks[0].live
    assert any("so far" in n for n in e.notes)


def test_the_cli_block() -> None:
    assert (size(None), size(512), size(1536), size(3 * 1024**3)) == (
        "-",
        "512 B",
        "1.50 KiB",
        "3.00 GiB",
    )
    assert (clock(None), clock(59.6), clock(3725), clock(90000)) == (
        "-",
        "00:01:00",
        "01:02:05",
        "1-01:00:00",
    )
    tasks = (task("7.main.0", cpu_seconds=400.0, gpu_util_mean=50.0), task("7.main.1"))
    e = job_efficiency(JobDetail(row(exit_code=0, name="r"), tasks), {}, now=999.0)
    text = report(e.model_dump(mode="json"))
    assert "Job ID: 7\nName: r\nUser: u\nState: Completed (exit code 0)" in text
    assert "Cores: 8.5 (3 tasks)" in text and "Elapsed: 00:01:40" in text
    assert "CPU utilized: 00:06:40" in text
    assert "CPU efficiency: 47.06% of 00:14:10 core-walltime" in text
    assert "Memory utilized: - (peak)\nMemory efficiency: - of 16.00 GiB" in text
    assert "GPUs: 2" in text and "GPU utilization: 50.00%" in text
    assert "Note: 1 of 2 tasks not sampled" in text
    assert "Tasks:\n  7.main.0" in text


class FakeClient:
    def __init__(self, answer: dict[str, Any] | Exception) -> None:
        self.answer = answer

    def efficiency(self, job_id: str) -> dict[str, Any]:
        if isinstance(self.answer, Exception):
            raise self.answer
        return self.answer


def test_the_line_of_show() -> None:
    tasks = (task("7.main.0", cpu_seconds=400.0, max_rss_bytes=MiB, gpu_util_mean=50.0),)
    e = job_efficiency(JobDetail(row(), tasks), {}, now=999.0).model_dump(mode="json")
    assert summary(FakeClient(e), "7") == (
        "efficiency: CPU 47.06% of 8.5 cores, memory 1.00 MiB peak of 16.00 GiB (0.01%), "
        "GPU 50.00% busy (fusesched eff 7)"
    )
    waiting = job_efficiency(JobDetail(row(state=JobState.PENDING)), {}, now=999.0)
    assert summary(FakeClient(waiting.model_dump(mode="json")), "7") is None
    assert summary(FakeClient(OSError("refused")), "7") is None
