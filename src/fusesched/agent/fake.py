"""A runtime whose tasks only pretend to run, on an injected clock (simulator-vs-live parity).

Each task "runs" for a duration taken, in this order, from the ``durations`` mapping (by task
id, then by job id), the launch's ``FUSESCHED_FAKE_DURATION`` environment variable (seconds),
or ``default_duration_s``; then it exits with ``FUSESCHED_FAKE_EXIT_CODE`` (default 0). A task
longer than its walltime ends at the walltime with exit code -15 and reason "walltime
exceeded", as a real task that does not trap SIGTERM does (a new limit, ``set_walltime``,
moves that end); ``kill`` ends a task at once with -15 and the given reason. Signals change
nothing a task does: they are recorded in ``signals`` (a launch's warning at its due time, its
lead before the time limit, unless the task ends first; ``signal`` at once).
``FUSESCHED_FAKE_FAIL_TO_START=<reason>`` makes the start fail; ``FUSESCHED_FAKE_OUTPUT`` is
the task's log.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from fusesched.agent.logtext import MAX_LOG_CHUNK, complete_utf8, decode_log_bytes
from fusesched.agent.runtime import REASON_SHUTDOWN, REASON_WALLTIME
from fusesched.agent.sensors import TaskWatch
from fusesched.api.wire import LogChunk, TaskLaunch, TaskReport, TaskState

FAKE_DURATION_ENV = "FUSESCHED_FAKE_DURATION"
FAKE_EXIT_CODE_ENV = "FUSESCHED_FAKE_EXIT_CODE"
FAKE_FAIL_ENV = "FUSESCHED_FAKE_FAIL_TO_START"
FAKE_OUTPUT_ENV = "FUSESCHED_FAKE_OUTPUT"
SIGTERM_EXIT = -15


@dataclass
class _FakeTask:
    launch: TaskLaunch
    pid: int
    seq: int
    started_at: float
    end_at: float
    exit_code: int
    reason: str
    duration: float  # how long it runs of itself
    code: int  # and the code it then exits with
    killed: bool = False
    warned: bool = False  # its launch's signal before the time limit was sent

    def warning_at(self) -> float | None:
        """When its launch's warning signal is due, if it is still to be sent while it runs."""
        warning, walltime = self.launch.signal, self.launch.walltime_s
        if warning is None or walltime is None or self.warned or self.killed:
            return None
        at = self.started_at + walltime - warning.before_s
        return at if at < self.end_at else None


class FakeRuntime:
    """Same interface as :class:`~fusesched.agent.runtime.ProcessRuntime`; no processes."""

    def __init__(
        self,
        clock: Callable[[], float],
        durations: Mapping[str, float] | None = None,
        *,
        default_duration_s: float = 0.0,
    ) -> None:
        self._clock = clock
        self._durations = dict(durations or {})
        self._default = default_duration_s
        self._tasks: dict[str, _FakeTask] = {}
        self._logs: dict[str, bytes] = {}
        self._pending: list[TaskReport] = []
        self._pids = itertools.count(100_000)
        self._seq = itertools.count()
        self.exit_times: dict[str, float] = {}  # task id → clock time at which it ended
        # (task id, signal name, clock time) of every signal a task got (warnings included)
        self.signals: list[tuple[str, str, float]] = []
        # called with a task's watch as it ends (as :class:`ProcessRuntime`'s: a final sample)
        self.on_exit: Callable[[TaskWatch], None] | None = None

    def _duration(self, launch: TaskLaunch) -> float:
        for key in (launch.task_id, launch.job_id):
            if key in self._durations:
                return float(self._durations[key])
        if FAKE_DURATION_ENV in launch.env:
            return float(launch.env[FAKE_DURATION_ENV])
        return self._default

    def start(self, launch: TaskLaunch) -> None:
        if launch.task_id in self._tasks:
            return
        env = launch.env
        if FAKE_FAIL_ENV in env:
            self._pending.append(
                TaskReport(
                    task_id=launch.task_id,
                    state=TaskState.FAILED_TO_START,
                    reason=env[FAKE_FAIL_ENV],
                )
            )
            return
        try:
            duration = self._duration(launch)
            code = int(env.get(FAKE_EXIT_CODE_ENV, "0"))
        except ValueError as exc:
            self._pending.append(
                TaskReport(
                    task_id=launch.task_id,
                    state=TaskState.FAILED_TO_START,
                    reason=f"bad fake task settings: {exc}",
                )
            )
            return
        now = self._clock()
        duration, natural = max(0.0, duration), code
        end, reason = now + duration, ""
        if launch.walltime_s is not None and duration > launch.walltime_s:
            end, code, reason = now + launch.walltime_s, SIGTERM_EXIT, REASON_WALLTIME
        task = _FakeTask(
            launch, next(self._pids), next(self._seq), now, end, code, reason, duration, natural
        )
        self._tasks[launch.task_id] = task
        self._logs[launch.task_id] = env.get(FAKE_OUTPUT_ENV, "").encode()
        self._pending.append(
            TaskReport(task_id=launch.task_id, state=TaskState.RUNNING, pid=task.pid)
        )

    def poll(self) -> list[TaskReport]:
        now = self._clock()
        for task in self._tasks.values():
            at = task.warning_at()
            if at is not None and at <= now and task.launch.signal is not None:
                task.warned = True
                self.signals.append((task.launch.task_id, task.launch.signal.name, at))
        done = sorted(
            (t for t in self._tasks.values() if t.end_at <= now), key=lambda t: (t.end_at, t.seq)
        )
        for task in done:
            task_id = task.launch.task_id
            if self.on_exit is not None:
                self.on_exit(self._watch(task))
            del self._tasks[task_id]
            self.exit_times[task_id] = task.end_at
            self._pending.append(
                TaskReport(
                    task_id=task_id,
                    state=TaskState.EXITED,
                    exit_code=task.exit_code,
                    reason=task.reason,
                    pid=task.pid,
                )
            )
        reports, self._pending = self._pending, []
        return reports

    def kill(self, task_id: str, grace_s: float = 10.0, reason: str = "cancelled") -> None:
        task = self._tasks.get(task_id)
        if task is None:
            return
        now = self._clock()
        if now < task.end_at:
            task.end_at, task.exit_code, task.reason = now, SIGTERM_EXIT, reason
            task.killed = True

    def set_walltime(self, task_id: str, walltime_s: float) -> None:
        """The task's time limit is now ``walltime_s`` from its start: it ends at the new
        limit (at once if that has passed) when it would run longer, else of itself. A task
        killed or ended already keeps its end."""
        task = self._tasks.get(task_id)
        now = self._clock()
        if task is None or task.killed or task.end_at <= now:
            return
        task.launch = task.launch.model_copy(update={"walltime_s": walltime_s})
        if task.duration > walltime_s:
            task.end_at = max(now, task.started_at + walltime_s)
            task.exit_code, task.reason = SIGTERM_EXIT, REASON_WALLTIME
        else:
            task.end_at = task.started_at + task.duration
            task.exit_code, task.reason = task.code, ""

    def running(self) -> list[str]:
        return sorted(self._tasks)

    def launches(self) -> list[TaskLaunch]:
        now = self._clock()
        return [t.launch for t in self._tasks.values() if now < t.end_at]

    def watches(self) -> list[TaskWatch]:
        """Each live task and its GPUs, with no process, log or checkpoint folder to look at
        (scripted sensors, :class:`~fusesched.agent.fake_sensors.FakeSensors`, speak for it)."""
        return [self._watch(t) for t in self._tasks.values()]

    @staticmethod
    def _watch(task: _FakeTask) -> TaskWatch:
        return TaskWatch(task.launch.task_id, gpu_indices=tuple(task.launch.gpu_indices))

    def next_deadline(self) -> float | None:
        times = [t.end_at for t in self._tasks.values()]
        times += [at for t in self._tasks.values() if (at := t.warning_at()) is not None]
        return min(times, default=None)

    def signal(self, task_id: str, name: str, main_only: bool = False) -> bool:
        """Record signal ``name`` for a task still running (:attr:`signals`); the task goes
        on. False for a task not running."""
        task = self._tasks.get(task_id)
        now = self._clock()
        if task is None or task.killed or task.end_at <= now:
            return False
        self.signals.append((task_id, name, now))
        return True

    def read_log(
        self, task_id: str, offset: int = 0, max_bytes: int = MAX_LOG_CHUNK
    ) -> LogChunk | None:
        log = self._logs.get(task_id, b"")
        data = log[offset : offset + max(4, max_bytes)]
        if offset + len(data) < len(log):
            data = complete_utf8(data)
        if not data:
            return None
        return LogChunk(task_id=task_id, offset=offset, data=decode_log_bytes(data))

    def shutdown(self, grace_s: float = 5.0) -> None:
        for task_id in list(self._tasks):
            self.kill(task_id, grace_s, REASON_SHUTDOWN)
