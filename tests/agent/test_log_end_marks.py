"""The agent marks the end of an ended task's log: once all of its output is delivered or in
the beat, an empty chunk at the log's length follows (with the exit report when it can), and a
large last burst goes in a few beats, not one chunk a beat (real processes, a recording
controller)."""

from __future__ import annotations

import json
import select
import threading

import httpx
import pytest

from fusesched.agent import client as agent_client
from fusesched.agent.client import AgentClient
from fusesched.agent.logtext import MAX_LOG_CHUNK
from fusesched.agent.runtime import ProcessRuntime
from fusesched.api.wire import Heartbeat, HeartbeatReply, NodeInventory, TaskState

from .helpers import launch

INVENTORY = NodeInventory(name="node-x", resources={"cpu": "2", "memory": "1Gi"})
BURST = 1_500_000


class Recorder:
    """Answers every beat (or refuses the next ``refuse`` of them) and keeps them."""

    def __init__(self) -> None:
        self.beats: list[Heartbeat] = []
        self.refuse = 0
        self.lock = threading.Lock()

    def __call__(self, request: httpx.Request) -> httpx.Response:
        with self.lock:
            if self.refuse:
                self.refuse -= 1
                return httpx.Response(503, json={"detail": "busy"})
            self.beats.append(Heartbeat.model_validate(json.loads(request.content)))
        return httpx.Response(200, content=HeartbeatReply().model_dump_json())


def agent(runtime: ProcessRuntime, recorder: Recorder) -> AgentClient:
    client = AgentClient("http://controller", INVENTORY, runtime, long_poll_s=0.0)
    client._http = httpx.Client(transport=httpx.MockTransport(recorder))
    return client


def started_and_ended(client: AgentClient, runtime: ProcessRuntime, task_id: str, cmd: str) -> None:
    """Start the task as a reply would, and wait for its process to exit (not yet reaped)."""
    client._obey(HeartbeatReply(launch=[launch(task_id, "sh", "-c", cmd)]))
    fds = runtime.exit_fds()
    assert fds
    poller = select.poll()
    poller.register(fds[0], select.POLLIN)
    assert poller.poll(10_000), "the task did not end"


def output(beats: list[Heartbeat], task_id: str) -> tuple[int, list[int]]:
    """(bytes of output the beats carry, the offsets of its end marks)."""
    size, marks = 0, []
    for beat in beats:
        for chunk in beat.logs:
            if chunk.task_id == task_id:
                size += len(chunk.data.encode())
                if not chunk.data:
                    marks.append(chunk.offset)
    return size, marks


def test_the_exit_report_carries_the_rest_of_the_output_and_the_end_mark(
    runtime: ProcessRuntime,
) -> None:
    recorder = Recorder()
    client = agent(runtime, recorder)
    started_and_ended(client, runtime, "j1.main.0", f"head -c {BURST} /dev/zero | tr '\\0' a")
    client._beat(full=False)
    (first,) = recorder.beats
    assert ("j1.main.0", TaskState.EXITED) in [(r.task_id, r.state) for r in first.reports]
    assert output([first], "j1.main.0") == (BURST, [BURST])  # all of it, then the mark
    assert first.logs[-1].data == "" and len(first.logs) > BURST // MAX_LOG_CHUNK
    assert "j1.main.0" not in client._offsets  # delivered: forgotten
    client._beat(full=False)
    assert len(recorder.beats) == 1  # nothing more to say


def test_a_burst_larger_than_a_beat_goes_in_several_then_the_mark(
    runtime: ProcessRuntime, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(agent_client, "MAX_BEAT_LOG_BYTES", BURST // 3)
    recorder = Recorder()
    client = agent(runtime, recorder)
    started_and_ended(client, runtime, "j2.main.0", f"head -c {BURST} /dev/zero | tr '\\0' b")
    for _ in range(10):
        client._beat(full=False)
    size, marks = output(recorder.beats, "j2.main.0")
    assert (size, marks) == (BURST, [BURST])
    assert 3 <= len(recorder.beats) <= 5
    assert recorder.beats[0].logs[-1].data != ""  # no mark before the output is all sent
    assert recorder.beats[-1].logs[-1].data == ""
    # every beat speaks of the ended task until its mark is delivered (so the controller
    # takes beats that leave it out as the agent having forgotten it: controller/logs.py)
    assert all(any(c.task_id == "j2.main.0" for c in b.logs) for b in recorder.beats)


def test_a_refused_beat_sends_the_mark_again(runtime: ProcessRuntime) -> None:
    recorder = Recorder()
    client = agent(runtime, recorder)
    started_and_ended(client, runtime, "j3.main.0", "printf done")
    recorder.refuse = 1
    with pytest.raises(httpx.HTTPStatusError):
        client._beat(full=False)
    client._beat(full=False)
    (beat,) = recorder.beats
    assert [(c.offset, c.data) for c in beat.logs] == [(0, "done"), (4, "")]
    assert TaskState.EXITED in [r.state for r in beat.reports]


def test_a_running_task_gets_no_mark(runtime: ProcessRuntime) -> None:
    recorder = Recorder()
    client = agent(runtime, recorder)
    client._obey(HeartbeatReply(launch=[launch("j4.main.0", "sh", "-c", "echo hi; sleep 30")]))
    for _ in range(200):
        client._beat(full=False)
        if output(recorder.beats, "j4.main.0")[0]:
            break
        threading.Event().wait(0.02)
    assert output(recorder.beats, "j4.main.0") == (3, [])
