"""A job step (agent/step_run.py) ends as soon as its tasks' logs are complete: with a controller
that says so (``X-Log-Complete``), the step makes no read and no pause after the one that
finds a task exited and its log complete; with an older one it waits for quiet, as before.
Counted on a scripted controller and a clock that moves only when the step sleeps, so the
outcome does not depend on how loaded the machine is."""

from __future__ import annotations

import json
from dataclasses import dataclass, field

import httpx
import pytest

from fusesched.agent import step_run
from fusesched.agent.step_plan import StepLaunch, StepTask
from fusesched.agent.step_run import DRAIN_QUIET_S, Step

TASK = "7.remote.0"


@dataclass
class Clock:
    """``time`` for the step: ``sleep`` moves ``monotonic`` on, and nothing else does."""

    now: float = 0.0
    slept: list[float] = field(default_factory=list)

    def monotonic(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds


@dataclass
class Controller:
    """Answers the step's calls: its task runs for ``running`` status reads, then has exited;
    its log is ``before`` while it runs and ``before + after`` once it has exited."""

    clock: Clock
    says_complete: bool = True
    confirmed: bool = True
    running: int = 2
    before: str = "first line\n"
    after: str = "last line\n"
    reads: list[tuple[float, int]] = field(default_factory=list)  # (when, offset)
    exited_at: float | None = None

    def __call__(self, request: httpx.Request) -> httpx.Response:
        path = request.url.path
        if request.method == "POST" and path == "/v1/jobs/7/steps":
            return httpx.Response(201, json={"step_id": 0, "task_ids": [TASK]})
        if path == f"/v1/tasks/{TASK}":
            if self.running > 0:
                self.running -= 1
                return httpx.Response(200, json={"state": "running"})
            if self.exited_at is None:
                self.exited_at = self.clock.now
            return httpx.Response(200, json={"state": "exited", "exit_code": 0})
        assert path == "/v1/jobs/7/logs" and request.url.params["task"] == TASK
        offset = int(request.url.params["offset"])
        self.reads.append((self.clock.now, offset))
        ended = self.exited_at is not None
        log = (self.before + self.after) if ended else self.before
        headers = {"x-next-offset": str(len(log.encode()))}
        if self.says_complete:
            headers["x-log-complete"] = "true" if ended else "false"
            headers["x-log-confirmed"] = "true" if ended and self.confirmed else "false"
        return httpx.Response(200, text=log.encode()[offset:].decode(), headers=headers)


def follow(controller: Controller) -> list[int]:
    http = httpx.Client(base_url="http://controller", transport=httpx.MockTransport(controller))
    run = Step(http, "7", label=False)
    task = StepTask(rank=0, node="n0", node_index=0, local_rank=0, local_size=1)
    assert run.create({"n0": 1}, False, [StepLaunch(task, ["true"], {})]) is None
    return run.follow(kill_on_bad_exit=False)


def test_a_step_ends_at_the_read_that_finds_the_log_complete(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    clock = Clock()
    monkeypatch.setattr(step_run, "time", clock)
    controller = Controller(clock)
    assert follow(controller) == [0]
    assert capsys.readouterr() == ("first line\nlast line\n", "")
    exited = controller.exited_at
    assert exited is not None
    # one read once the task had exited (its output whole and complete), then nothing: no
    # pause, no read waiting for quiet
    assert [at for at, _ in controller.reads if at >= exited] == [exited]
    assert clock.now == exited


def test_an_unconfirmed_end_is_warned_of(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    clock = Clock()
    monkeypatch.setattr(step_run, "time", clock)
    assert follow(Controller(clock, confirmed=False)) == [0]
    out, err = capsys.readouterr()
    assert out == "first line\nlast line\n"
    assert "srun: warning: task 0 on n0: its output may be missing its end" in err


def test_an_older_controller_is_waited_on_until_quiet(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    clock = Clock()
    monkeypatch.setattr(step_run, "time", clock)
    controller = Controller(clock, says_complete=False)
    assert follow(controller) == [0]
    assert capsys.readouterr().out == "first line\nlast line\n"
    exited = controller.exited_at
    assert exited is not None and clock.now - exited >= DRAIN_QUIET_S
    assert len([at for at, _ in controller.reads if at >= exited]) >= 2
    assert json.dumps(clock.slept)  # (it paused between reads)
