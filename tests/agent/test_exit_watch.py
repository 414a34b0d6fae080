"""Exits are seen the moment they happen (pidfds), not at the next poll period; tasks switch
to their user's identity in the child, never exposing root to the task's environment."""

from __future__ import annotations

import json
import os
import select
import shutil
import tempfile
import threading
import time
from pathlib import Path

import httpx
import pytest

from fusesched.agent import client as agent_client
from fusesched.agent.client import AgentClient
from fusesched.agent.runtime import ProcessRuntime
from fusesched.agent.users import Identity
from fusesched.api.wire import Heartbeat, HeartbeatReply, NodeInventory, TaskState

from .helpers import launch, run_one, wait_end

INVENTORY = NodeInventory(name="node-x", resources={"cpu": "2", "memory": "1Gi"})


def test_a_pidfd_becomes_readable_when_its_task_exits(runtime: ProcessRuntime) -> None:
    runtime.start(launch("j1.0.0", "sleep", "0.3"))
    fds = runtime.exit_fds()
    assert fds is not None and len(fds) == 1
    poller = select.poll()
    poller.register(fds[0], select.POLLIN)
    assert poller.poll(0) == []  # still running
    started = time.monotonic()
    assert poller.poll(10_000), "no exit seen"
    assert 0.2 < time.monotonic() - started < 5.0
    report = wait_end(runtime, "j1.0.0")["j1.0.0"]
    assert (report.state, report.exit_code) == (TaskState.EXITED, 0)
    assert runtime.exit_fds() == []  # reaped: its pidfd is closed


class ReportingController:
    """Answers the agent in-process: full beats long-poll, quick reports are kept."""

    def __init__(self) -> None:
        self.quick: list[tuple[float, Heartbeat, str]] = []
        self.lock = threading.Lock()

    def __call__(self, request: httpx.Request) -> httpx.Response:
        if request.url.path.endswith("/register"):
            return httpx.Response(200, json={})
        beat = Heartbeat.model_validate(json.loads(request.content))
        if beat.running is None:
            with self.lock:
                self.quick.append((time.monotonic(), beat, str(request.url.query)))
        elif float(request.url.params.get("wait", "0")) > 0:
            time.sleep(0.2)  # a long poll with nothing to hand out
        return httpx.Response(200, content=HeartbeatReply().model_dump_json())

    def exits(self) -> list[tuple[float, str]]:
        with self.lock:
            return [
                (at, query)
                for at, beat, query in self.quick
                for r in beat.reports
                if r.state is TaskState.EXITED
            ]


def test_an_exit_is_reported_at_once_not_at_the_next_period(
    runtime: ProcessRuntime, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # periods far longer than the test: only the pidfd can wake the report thread in time
    monkeypatch.setattr(agent_client, "LOG_PERIOD_S", 30.0)
    monkeypatch.setattr(agent_client, "REPORT_PERIOD_S", 30.0)
    controller = ReportingController()
    client = AgentClient("http://controller", INVENTORY, runtime, long_poll_s=1.0)
    client._http = httpx.Client(transport=httpx.MockTransport(controller))
    stamp = tmp_path / "ended"
    client.start()
    try:
        time.sleep(0.1)  # the report thread is asleep, with no task to watch
        client._obey(
            HeartbeatReply(
                launch=[launch("j2.0.0", "sh", "-c", f"sleep 0.5; date +%s.%N > {stamp}")]
            )
        )
        deadline = time.monotonic() + 10
        while not controller.exits() and time.monotonic() < deadline:
            time.sleep(0.01)
        [(reported, query)] = controller.exits()
    finally:
        client.stop()
    ended_ago = time.time() - float(stamp.read_text())  # the task's last act, seconds ago
    lag = reported - (time.monotonic() - ended_ago)
    assert lag < 2.0, f"the exit was reported {lag:.2f} s after the task ended"
    assert "launch=true" in query and "wait=" in query  # takes work, waits for its cycle


def test_a_start_alone_does_not_make_a_quick_report(
    runtime: ProcessRuntime, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(agent_client, "RUNNING_REPORT_DELAY_S", 0.4)
    controller = ReportingController()
    client = AgentClient("http://controller", INVENTORY, runtime, long_poll_s=5.0)
    client._http = httpx.Client(transport=httpx.MockTransport(controller))
    runtime.start(launch("j3.0.0", "sleep", "30"))
    client._beat(full=False)
    assert controller.quick == []  # the start waits for something to ride with
    time.sleep(0.45)
    client._beat(full=False)  # ... but not for long
    [(_, beat, _)] = controller.quick
    assert [(r.task_id, r.state) for r in beat.reports] == [("j3.0.0", TaskState.RUNNING)]


@pytest.mark.skipif(os.geteuid() != 0, reason="only root switches users")
def test_tasks_run_as_their_identity_without_extra_groups() -> None:
    who = Identity("someone", 234567, 234568)
    shared = Path(tempfile.mkdtemp(prefix="fusesched-identity-"))
    shared.chmod(0o755)  # pytest's own folders are private to root
    rt = ProcessRuntime(shared / "work", identities=lambda _user: who)
    try:
        report, text = run_one(rt, launch("j4.0.0", "sh", "-c", "id -u; id -g; id -G; echo $HOME"))
    finally:
        rt.shutdown(grace_s=0.2)
        shutil.rmtree(shared, ignore_errors=True)
    assert report.exit_code == 0, text
    uid, gid, groups, home = text.split("\n")[:4]
    assert (int(uid), int(gid), groups.split()) == (234567, 234568, ["234568"])
    assert home == str(shared / "work" / "tasks" / "j4.0.0")
