"""Quick reports that carry an exit get the next launch in their reply (one exchange per task
turnover), without a task sent that way looking lost to a full beat listed before it started;
agents that do not say they take work on quick reports get none there (scripted heartbeats)."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.builders import Clock

from fusesched.api.wire import Heartbeat, HeartbeatReply, NodeInventory, TaskReport, TaskState
from fusesched.controller.agents import UNCONFIRMED_GRACE_S
from fusesched.controller.logs import LogStore
from fusesched.controller.persist import Persistence
from fusesched.controller.service import Controller
from fusesched.submit.request import JobRequest


@pytest.fixture
def ctl(tmp_path: Path, clock: Clock) -> Iterator[Controller]:
    persist = Persistence(f"sqlite:///{tmp_path / 'db.sqlite'}")
    controller = Controller(persist, LogStore(tmp_path / "logs"), clock=clock)
    controller.register(NodeInventory(name="n0", resources={"cpu": "1", "memory": "4Gi"}))
    controller.run_cycle()
    yield controller
    persist.close()


def request(name: str) -> JobRequest:
    return JobRequest.model_validate(
        {"name": name, "groups": [{"resources": {"cpu": "1"}, "argv": ["true"]}]}
    )


def exited(task_id: str) -> Heartbeat:
    report = TaskReport(task_id=task_id, state=TaskState.EXITED, exit_code=0)
    return Heartbeat(node="n0", reports=[report])


def first_launch(ctl: Controller) -> str:
    ctl.run_cycle()
    reply = ctl.heartbeat(Heartbeat(node="n0", running=[]), wait_s=0)
    (launch,) = reply.launch
    return launch.task_id


def answered_after_a_cycle(ctl: Controller, beat: Heartbeat, launch: bool) -> HeartbeatReply:
    """Send ``beat`` from another thread (as an agent would) and run the cycle it waits for."""
    replies: list[HeartbeatReply] = []
    sender = threading.Thread(target=lambda: replies.append(ctl.heartbeat(beat, 5.0, launch)))
    sender.start()
    time.sleep(0.1)  # the beat is waiting for the cycle by now
    ctl.run_cycle()
    sender.join(timeout=5)
    assert not sender.is_alive()
    return replies[0]


def test_a_quick_exit_report_gets_the_next_launch(ctl: Controller) -> None:
    ctl.submit([request("a"), request("b")])
    first = first_launch(ctl)
    started = time.monotonic()
    reply = answered_after_a_cycle(ctl, exited(first), launch=True)
    assert time.monotonic() - started < 4.0  # the cycle ended the wait, not the timeout
    (launch,) = reply.launch
    assert launch.task_id != first
    assert ctl.tasks[launch.task_id][1].state == "delivered"


def test_an_agent_that_does_not_say_so_gets_no_work_on_quick_reports(ctl: Controller) -> None:
    ctl.submit([request("a"), request("b")])
    first = first_launch(ctl)
    assert ctl.heartbeat(exited(first), 5.0) == HeartbeatReply()  # at once, and empty
    ctl.run_cycle()
    reply = ctl.heartbeat(Heartbeat(node="n0", running=[]), wait_s=0)
    assert len(reply.launch) == 1  # the full beat takes it


def test_a_quick_report_without_an_exit_does_not_wait(ctl: Controller) -> None:
    ctl.submit([request("a")])
    first = first_launch(ctl)
    running = TaskReport(task_id=first, state=TaskState.RUNNING, pid=42)
    started = time.monotonic()
    reply = ctl.heartbeat(Heartbeat(node="n0", reports=[running]), 5.0, True)
    assert time.monotonic() - started < 1.0
    assert reply == HeartbeatReply()
    assert ctl.tasks[first][1].state == "running"


def test_a_launch_sent_on_a_quick_report_is_not_lost_to_an_older_full_beat(
    ctl: Controller, clock: Clock
) -> None:
    ctl.submit([request("a"), request("b")])
    first = first_launch(ctl)
    (second,) = [t.task_id for t in answered_after_a_cycle(ctl, exited(first), True).launch]
    # the work thread listed the node's tasks before the launch started
    ctl.heartbeat(Heartbeat(node="n0", running=[]), wait_s=0)
    assert ctl.tasks[second][1].state == "delivered"
    # ... but a task its agent never reports is lost once the grace is over
    clock.now += UNCONFIRMED_GRACE_S + 1
    ctl.heartbeat(Heartbeat(node="n0", running=[]), wait_s=0)
    task = ctl.tasks.get(second, (None, ctl.finished.get(second)))[1]
    assert task is not None and task.state == "exited" and task.reason == "lost by its agent"


def test_a_launch_reported_running_is_not_lost_to_an_older_full_beat(ctl: Controller) -> None:
    """The task sent on a quick report says RUNNING on the next quick report, and only then
    does the work thread's full beat (listed before it started) arrive."""
    ctl.submit([request("a"), request("b")])
    first = first_launch(ctl)
    (second,) = [t.task_id for t in answered_after_a_cycle(ctl, exited(first), True).launch]
    running = TaskReport(task_id=second, state=TaskState.RUNNING, pid=4321)
    ctl.heartbeat(Heartbeat(node="n0", reports=[running]), wait_s=0, launch=True)
    assert ctl.tasks[second][1].state == "running"
    ctl.heartbeat(Heartbeat(node="n0", running=[]), wait_s=0)
    assert ctl.tasks[second][1].state == "running"


def test_a_task_started_in_the_full_beats_way_is_lost_at_once(ctl: Controller) -> None:
    ctl.submit([request("a")])
    first = first_launch(ctl)  # sent on a full beat: the next full beat must list it
    ctl.heartbeat(Heartbeat(node="n0", running=[]), wait_s=0)
    task = ctl.tasks.get(first, (None, ctl.finished.get(first)))[1]
    assert task is not None and task.state == "exited" and task.reason == "lost by its agent"
