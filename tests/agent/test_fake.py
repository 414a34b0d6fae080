"""FakeRuntime: tasks that pretend to run on an injected clock."""

from __future__ import annotations

from fusesched.agent.fake import FakeRuntime
from fusesched.agent.logtext import chunk_end
from fusesched.api.wire import TaskState

from .helpers import launch


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_durations_exit_codes_walltime_and_kill() -> None:
    clock = Clock()
    rt = FakeRuntime(clock, durations={"j2": 30.0}, default_duration_s=1.0)
    rt.start(
        launch("j1.0.0", env={"FUSESCHED_FAKE_DURATION": "5", "FUSESCHED_FAKE_EXIT_CODE": "2"})
    )
    rt.start(launch("j2.0.0"))  # 30 s from the mapping, by job id
    rt.start(launch("j3.0.0", walltime_s=10.0, env={"FUSESCHED_FAKE_DURATION": "99"}))
    rt.start(launch("j4.0.0"))  # the default: 1 s
    rt.start(launch("j5.0.0", env={"FUSESCHED_FAKE_FAIL_TO_START": "image not found: x"}))
    first = rt.poll()
    assert [(r.task_id, r.state) for r in first] == [
        ("j1.0.0", TaskState.RUNNING),
        ("j2.0.0", TaskState.RUNNING),
        ("j3.0.0", TaskState.RUNNING),
        ("j4.0.0", TaskState.RUNNING),
        ("j5.0.0", TaskState.FAILED_TO_START),
    ]
    assert rt.next_deadline() == 101.0
    clock.now = 104.0
    assert [(r.task_id, r.exit_code) for r in rt.poll()] == [("j4.0.0", 0)]
    clock.now = 112.0
    ends = rt.poll()
    assert [(r.task_id, r.exit_code, r.reason) for r in ends] == [
        ("j1.0.0", 2, ""),
        ("j3.0.0", -15, "walltime exceeded"),
    ]
    assert rt.exit_times == {"j4.0.0": 101.0, "j1.0.0": 105.0, "j3.0.0": 110.0}
    rt.kill("j2.0.0", 10.0, "cancelled")
    assert rt.running() == ["j2.0.0"]  # ended, reported at the next poll
    [killed] = rt.poll()
    assert (killed.exit_code, killed.reason) == (-15, "cancelled")
    assert rt.running() == [] and rt.next_deadline() is None


def test_fake_logs_and_shutdown() -> None:
    clock = Clock()
    rt = FakeRuntime(clock, default_duration_s=60.0)
    rt.start(launch("j1.0.0", env={"FUSESCHED_FAKE_OUTPUT": "h\u00e9llo\n"}))
    chunk = rt.read_log("j1.0.0", 0, max_bytes=4)
    assert chunk is not None and chunk.data == "h\u00e9l"
    rest = rt.read_log("j1.0.0", chunk_end(chunk))
    assert rest is not None and rest.data == "lo\n"
    assert rt.read_log("j1.0.0", chunk_end(rest)) is None
    rt.shutdown()
    reports = rt.poll()
    assert reports[-1].reason == "agent shutdown"
