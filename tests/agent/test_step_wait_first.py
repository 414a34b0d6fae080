"""``srun -W SECONDS`` (agent/step_run.py): once a task has ended, those still running are
killed that long after, as Slurm's srun says it; without ``-W`` they run on. On a scripted
controller and a clock that moves only when the step sleeps."""

from __future__ import annotations

from dataclasses import dataclass, field

import httpx
import pytest

from fusesched.agent import step_run
from fusesched.agent.step_plan import StepLaunch, StepTask
from fusesched.agent.step_run import Step

TASKS = ["7.remote.0", "7.remote.1"]


@dataclass
class Clock:
    now: float = 0.0

    def monotonic(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


@dataclass
class Controller:
    """Task 0 exits at once; task 1 runs until it is killed (or until ``ends_at``)."""

    clock: Clock
    ends_at: float = 100.0
    killed: list[tuple[float, str]] = field(default_factory=list)

    def __call__(self, request: httpx.Request) -> httpx.Response:
        path = request.url.path
        if request.method == "POST":
            return httpx.Response(201, json={"step_id": 4, "task_ids": TASKS})
        if request.method == "DELETE":
            self.killed.append((self.clock.now, path.rsplit("/", 1)[1]))
            return httpx.Response(200, json={})
        if path.startswith("/v1/tasks/"):
            task = path.rsplit("/", 1)[1]
            ended = task == TASKS[0] or self.killed or self.clock.now >= self.ends_at
            code = 0 if task == TASKS[0] else 137 if self.killed else 0
            state = {"state": "exited", "exit_code": code} if ended else {"state": "running"}
            return httpx.Response(200, json=state)
        headers = {"x-next-offset": "0", "x-log-complete": "true", "x-log-confirmed": "true"}
        return httpx.Response(200, text="", headers=headers)


def follow(controller: Controller, wait: int | None) -> list[int]:
    http = httpx.Client(base_url="http://controller", transport=httpx.MockTransport(controller))
    step = Step(http, "7", label=False)
    tasks = [StepTask(rank, "n0", 0, rank, 2) for rank in (0, 1)]
    launches = [StepLaunch(task, ["true"], {}) for task in tasks]
    assert step.create({"n0": 2}, False, launches) is None
    return step.follow(kill_on_bad_exit=False, wait=wait)


def test_wait_kills_the_others_that_long_after_the_first_end(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    clock = Clock()
    monkeypatch.setattr(step_run, "time", clock)
    controller = Controller(clock)
    assert follow(controller, wait=5) == [0, 137]
    ((at, task),) = controller.killed
    assert task == TASKS[1] and 5 <= at < 6
    err = capsys.readouterr().err
    assert "srun: First task exited 5s ago" in err
    assert "srun: StepId=7.4 task 1: running" in err
    assert "srun: StepId=7.4 task 0: exited" in err


def test_without_wait_the_others_run_on(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    clock = Clock()
    monkeypatch.setattr(step_run, "time", clock)
    controller = Controller(clock, ends_at=30.0)
    assert follow(controller, wait=None) == [0, 0]
    assert follow(zero := Controller(clock, ends_at=60.0), wait=0) == [0, 0]  # (0: no limit)
    assert controller.killed == zero.killed == []
    assert "First task" not in capsys.readouterr().err
