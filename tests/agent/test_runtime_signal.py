"""Signals to running tasks: the launch's warning before the time limit (``sbatch --signal``),
sent once, moved by a new limit while not sent yet, and a signal on demand (``fusesched
cancel --signal``) to the process group or the main process; the fake runtime records both."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

from fusesched.agent.fake import FakeRuntime
from fusesched.agent.runtime import REASON_WALLTIME, ProcessRuntime
from fusesched.api.wire import TaskLaunch, TaskState

from .conftest import make_rootfs
from .helpers import launch, read_all, wait_end

# writes the time (monotonic, as the runtime's clock) each SIGUSR1 came; a child in the
# same process group (the "training" process) writes its own file
TRAP = """
trap 'python3 -c "import time; print(time.monotonic())" >> "$OUT/main"' USR1
( trap 'echo child >> "$OUT/child"' USR1; while :; do sleep 0.05; done ) &
while :; do sleep 0.05; done
"""


def started(rt: ProcessRuntime, task_id: str) -> float:
    """Wait for the RUNNING report; the clock time the task started about."""
    assert [r.state for r in rt.poll() if r.task_id == task_id] == [TaskState.RUNNING]
    return time.monotonic()


def poll_until(rt: ProcessRuntime, done: Callable[[], object], timeout: float = 8.0) -> None:
    deadline = time.monotonic() + timeout
    while not done():
        assert time.monotonic() < deadline, "timed out"
        rt.poll()
        time.sleep(0.02)


def trap_launch(task_id: str, out: Path, **fields: object) -> TaskLaunch:
    return launch(task_id, script=TRAP, env={"OUT": str(out)}, grace_s=0.5, **fields)


def lines(path: Path) -> list[str]:
    return path.read_text().split() if path.exists() else []


def test_the_warning_comes_its_lead_before_the_limit_once(
    runtime: ProcessRuntime, tmp_path: Path
) -> None:
    signal = {"name": "USR1", "before_s": 1.5}
    runtime.start(trap_launch("w1.0.0", tmp_path, walltime_s=2.5, signal=signal))
    began = started(runtime, "w1.0.0")
    deadline = runtime.next_deadline()
    assert deadline is not None and 0.6 < deadline - began < 1.2  # the warning's, not the limit's
    report = wait_end(runtime, "w1.0.0")["w1.0.0"]
    assert report.reason == REASON_WALLTIME  # the warning does not stop it
    (warned,) = lines(tmp_path / "main")  # once
    assert 0.8 <= float(warned) - began < 1.6
    assert lines(tmp_path / "child") == ["child"]  # the whole process group got it


def test_main_only_signals_the_main_process_alone(runtime: ProcessRuntime, tmp_path: Path) -> None:
    signal = {"name": "USR1", "before_s": 30, "main_only": True}
    runtime.start(trap_launch("w2.0.0", tmp_path, walltime_s=30.5, signal=signal))
    started(runtime, "w2.0.0")
    poll_until(runtime, lambda: lines(tmp_path / "main"))  # due at once: 0.5 s after start
    time.sleep(0.3)
    assert lines(tmp_path / "child") == []
    runtime.kill("w2.0.0", 0.0)
    wait_end(runtime, "w2.0.0")


def test_a_new_limit_moves_a_warning_not_sent_yet(runtime: ProcessRuntime, tmp_path: Path) -> None:
    signal = {"name": "USR1", "before_s": 1}
    runtime.start(trap_launch("w3.0.0", tmp_path, walltime_s=60, signal=signal))
    began = started(runtime, "w3.0.0")
    runtime.set_walltime("w3.0.0", 2.0)  # warned at 1 s now, not at 59 s
    poll_until(runtime, lambda: lines(tmp_path / "main"))
    assert 0.8 <= float(lines(tmp_path / "main")[0]) - began < 1.6
    runtime.set_walltime("w3.0.0", 60)  # sent already: not again
    time.sleep(1.5)
    runtime.poll()
    assert len(lines(tmp_path / "main")) == 1
    runtime.kill("w3.0.0", 0.0)
    wait_end(runtime, "w3.0.0")


def test_a_task_without_a_limit_or_ending_first_is_not_warned(
    runtime: ProcessRuntime, tmp_path: Path
) -> None:
    signal = {"name": "USR1", "before_s": 1}
    runtime.start(trap_launch("w4.0.0", tmp_path, signal=signal))  # no limit
    started(runtime, "w4.0.0")
    assert runtime.next_deadline() is None
    runtime.kill("w4.0.0", 0.0)
    wait_end(runtime, "w4.0.0")
    assert lines(tmp_path / "main") == []


def test_a_signal_on_demand_reaches_the_group_and_the_task_goes_on(
    runtime: ProcessRuntime, tmp_path: Path
) -> None:
    runtime.start(trap_launch("s1.0.0", tmp_path))
    started(runtime, "s1.0.0")
    time.sleep(0.2)  # its traps are set
    assert runtime.signal("s1.0.0", "USR1")
    poll_until(runtime, lambda: lines(tmp_path / "main") and lines(tmp_path / "child"))
    assert runtime.signal("s1.0.0", "USR1", main_only=True)
    poll_until(runtime, lambda: len(lines(tmp_path / "main")) == 2)
    assert lines(tmp_path / "child") == ["child"]
    assert runtime.running() == ["s1.0.0"]  # still running
    assert not runtime.signal("gone.0.0", "USR1")  # not running here: nothing sent
    assert not runtime.signal("s1.0.0", "NOPE")  # (the controller sends known names only)
    runtime.kill("s1.0.0", 0.5, "cancelled")
    assert not runtime.signal("s1.0.0", "USR1")  # being stopped
    assert wait_end(runtime, "s1.0.0")["s1.0.0"].reason == "cancelled"


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_the_fake_runtime_records_warnings_and_signals() -> None:
    clock = Clock()
    rt = FakeRuntime(clock, default_duration_s=50.0)
    warn = {"name": "USR1", "before_s": 5.0}
    rt.start(launch("a.0.0", walltime_s=20.0, signal=warn))  # warned at 115, cut at 120
    rt.start(launch("b.0.0", walltime_s=100.0, signal=warn))  # ends at 150, before 195
    rt.start(launch("c.0.0", walltime_s=20.0, signal=warn))  # its limit moves to 40
    rt.poll()
    assert rt.next_deadline() == 115.0
    clock.now = 110.0
    rt.set_walltime("c.0.0", 40.0)
    assert rt.signal("b.0.0", "USR2")
    clock.now = 200.0
    rt.poll()
    assert rt.signals == [
        ("b.0.0", "USR2", 110.0),
        ("a.0.0", "USR1", 115.0),
        ("c.0.0", "USR1", 135.0),
    ]
    assert not rt.signal("a.0.0", "USR1")  # ended


def test_a_container_tasks_main_process_is_its_command(
    container_runtime: ProcessRuntime, tmp_path: Path
) -> None:
    image = make_rootfs(tmp_path / "image")
    script = (
        "trap 'echo main-usr1' USR1; ( trap 'echo child-usr1' USR1; while :; do sleep 0.02; "
        "done ) & echo ready; while :; do sleep 0.02; done"
    )
    container_runtime.start(launch("c9.0.0", "/bin/bash", "-c", script, image=str(image)))
    poll_until(container_runtime, lambda: "ready" in read_all(container_runtime, "c9.0.0"))
    time.sleep(0.1)  # (the child's trap too)
    assert container_runtime.signal("c9.0.0", "USR1", main_only=True)  # bash, not bwrap
    poll_until(container_runtime, lambda: "main-usr1" in read_all(container_runtime, "c9.0.0"))
    time.sleep(0.3)
    assert "child-usr1" not in read_all(container_runtime, "c9.0.0")
    assert container_runtime.signal("c9.0.0", "USR1")
    poll_until(container_runtime, lambda: "child-usr1" in read_all(container_runtime, "c9.0.0"))
    assert container_runtime.running() == ["c9.0.0"]
    container_runtime.kill("c9.0.0", 0.0)
    wait_end(container_runtime, "c9.0.0")
