"""A running task's new time limit (``set_walltime``, from a heartbeat reply's ``limit``): the
runtime kills it at the new deadline, counted from the task's start, or lets it outlive the old
one; the fake runtime and a launch still waiting for its datasets follow it too."""

from __future__ import annotations

import time
from pathlib import Path

from fusesched.agent.fake import FakeRuntime
from fusesched.agent.runtime import REASON_WALLTIME, ProcessRuntime
from fusesched.agent.task_data import TaskData
from fusesched.api.wire import TaskState

from .helpers import launch, wait_end


def started(rt: ProcessRuntime, task_id: str) -> None:
    assert [r.state for r in rt.poll() if r.task_id == task_id] == [TaskState.RUNNING]


def test_a_shorter_limit_kills_the_task_at_the_new_deadline(runtime: ProcessRuntime) -> None:
    began = time.monotonic()
    runtime.start(launch("j1.0.0", "sleep", "30", walltime_s=600, grace_s=1.0))
    started(runtime, "j1.0.0")
    runtime.set_walltime("j1.0.0", 0.5)
    deadline = runtime.next_deadline()
    assert deadline is not None and deadline - time.monotonic() < 0.6
    report = wait_end(runtime, "j1.0.0")["j1.0.0"]
    assert (report.exit_code, report.reason) == (-15, REASON_WALLTIME)
    assert 0.5 <= time.monotonic() - began < 5.0
    assert runtime.launches() == []


def test_a_longer_limit_lets_the_task_outlive_the_old_one(runtime: ProcessRuntime) -> None:
    began = time.monotonic()
    runtime.start(launch("j2.0.0", "sleep", "1.2", walltime_s=0.4, grace_s=1.0))
    started(runtime, "j2.0.0")
    runtime.set_walltime("j2.0.0", 60)
    (live,) = runtime.launches()
    assert live.walltime_s == 60  # what a restarted controller adopts
    report = wait_end(runtime, "j2.0.0")["j2.0.0"]
    assert (report.exit_code, report.reason) == (0, "")
    assert time.monotonic() - began >= 1.2


def test_a_task_being_killed_keeps_its_reason(runtime: ProcessRuntime) -> None:
    runtime.start(launch("j3.0.0", "sleep", "30", walltime_s=600, grace_s=1.0))
    started(runtime, "j3.0.0")
    runtime.kill("j3.0.0", 1.0, "cancelled")
    runtime.set_walltime("j3.0.0", 0.1)  # too late: it is being stopped
    report = wait_end(runtime, "j3.0.0")["j3.0.0"]
    assert report.reason == "cancelled"
    runtime.set_walltime("gone.0.0", 5)  # an unknown task: nothing happens


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_the_fake_runtime_follows_a_new_limit() -> None:
    clock = Clock()
    rt = FakeRuntime(clock, default_duration_s=50.0)
    for task_id in ("a.0.0", "b.0.0", "c.0.0"):
        rt.start(launch(task_id, walltime_s=20.0))  # 50 s of work, cut at 20 s
    rt.poll()
    clock.now = 110.0
    rt.set_walltime("a.0.0", 15.0)  # shorter: ends at 115
    rt.set_walltime("b.0.0", 100.0)  # longer: runs its 50 s and exits 0
    rt.set_walltime("c.0.0", 5.0)  # passed already: ends now
    assert [(r.task_id, r.exit_code, r.reason) for r in rt.poll()] == [
        ("c.0.0", -15, REASON_WALLTIME)
    ]
    clock.now = 160.0
    assert [(r.task_id, r.exit_code, r.reason) for r in rt.poll()] == [
        ("a.0.0", -15, REASON_WALLTIME),
        ("b.0.0", 0, ""),
    ]
    assert rt.exit_times == {"c.0.0": 110.0, "a.0.0": 115.0, "b.0.0": 150.0}


def test_a_launch_waiting_for_its_datasets_starts_with_the_new_limit(tmp_path: Path) -> None:
    source = tmp_path / "words.txt"
    source.write_text("hello\n")
    data = TaskData(None)
    dataset = {"name": "words", "source": str(source)}
    data.begin(launch("d.0.0", "true", walltime_s=600, datasets=[dataset]))
    data.set_walltime("d.0.0", 30)
    ((ready, grants),) = data.ready()
    assert ready.walltime_s == 30 and not isinstance(grants, str)
