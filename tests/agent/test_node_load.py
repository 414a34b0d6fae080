"""The node's free memory and load averages in full heartbeats (agent/node_load.py): read from
/proc (``MemFree``, as Slurm's slurmd, not ``MemAvailable``), sent on full beats only, and left
out of the beats to a controller older than the field, which refuses it (422)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient
from pydantic import create_model

from fusesched.agent.client import AgentClient
from fusesched.agent.fake import FakeRuntime
from fusesched.agent.node_load import read_node_load
from fusesched.api.wire import Heartbeat, HeartbeatReply, NodeInventory, NodeLoadWire

from .helpers import launch
from .test_agent_sensing import FakeController

INVENTORY = NodeInventory(name="node-l", resources={"cpu": "2", "memory": "1Gi"})
LOAD = NodeLoadWire(free_memory_bytes=3 << 30, load1=0.52, load5=1.25)
MEMINFO = "MemTotal:       16000000 kB\nMemFree:         1234567 kB\nMemAvailable:    9999999 kB\n"


def proc(tmp_path: Path, meminfo: str | None = MEMINFO, loadavg: str | None = None) -> Path:
    if meminfo is not None:
        (tmp_path / "meminfo").write_text(meminfo)
    if loadavg is not None:
        (tmp_path / "loadavg").write_text(loadavg)
    return tmp_path


def test_free_memory_is_memfree_and_the_load_the_1_and_5_minute_averages(tmp_path: Path) -> None:
    found = read_node_load(proc(tmp_path, loadavg="0.52 1.25 2.00 3/456 7890\n"))
    assert found == NodeLoadWire(free_memory_bytes=1234567 * 1024, load1=0.52, load5=1.25)


def test_what_cannot_be_read_is_none(tmp_path: Path) -> None:
    assert read_node_load(proc(tmp_path, meminfo=None)) is None
    only_memory = read_node_load(proc(tmp_path, loadavg="garbage\n"))
    assert only_memory == NodeLoadWire(free_memory_bytes=1234567 * 1024)
    (tmp_path / "meminfo").write_text("MemFree: lots kB\n")
    (tmp_path / "loadavg").write_text("0.10 0.20 0.30 1/2 3\n")
    assert read_node_load(tmp_path) == NodeLoadWire(load1=0.1, load5=0.2)


def test_this_machine_is_read() -> None:
    if not Path("/proc/loadavg").exists():
        pytest.skip("no /proc")
    found = read_node_load()
    assert found is not None and found.free_memory_bytes and found.load5 is not None


def agent(controller: Any, reader: Any = lambda: LOAD) -> AgentClient:
    client = AgentClient(
        "http://controller", INVENTORY, FakeRuntime(time.time), long_poll_s=0.0, node_load=reader
    )
    client._http = controller
    return client


def test_full_beats_carry_the_load_quick_reports_do_not() -> None:
    controller = FakeController()
    client = agent(httpx.Client(transport=httpx.MockTransport(controller)))
    client._beat(full=True)
    client.runtime.start(launch("t1", "true"))
    client._beat(full=False)  # (a task's RUNNING report waits a little for company)
    time.sleep(0.25)
    client._beat(full=False)
    full = [b for b in controller.beats if b.running is not None]
    quick = [b for b in controller.beats if b.running is None]
    assert [b.load for b in full] == [LOAD]
    assert len(quick) == 1 and quick[0].load is None


def test_a_failing_reader_does_not_stop_the_beat() -> None:
    controller = FakeController()

    def broken() -> NodeLoadWire:
        raise OSError("no /proc")

    client = agent(httpx.Client(transport=httpx.MockTransport(controller)), broken)
    client._beat(full=True)
    assert [b.load for b in controller.beats] == [None]


#: A heartbeat as a controller older than the ``load`` field reads it: without it, refusing
#: unknown fields (as every wire model does).
OldHeartbeat = create_model(
    "OldHeartbeat",
    __config__=Heartbeat.model_config,
    **{
        name: (info.annotation, info)
        for name, info in Heartbeat.model_fields.items()
        if name != "load"
    },
)


def older_controller() -> tuple[TestClient, list[dict[str, Any]]]:
    """A controller older than the field (its route refuses unknown fields, as FastAPI does);
    the beats it took."""
    app = FastAPI()
    taken: list[dict[str, Any]] = []

    @app.post("/v1/agents/register", status_code=201)
    def register(inventory: NodeInventory) -> dict[str, str]:
        return {"node": inventory.name}

    @app.post("/v1/agents/heartbeat")
    def heartbeat(beat: OldHeartbeat) -> dict[str, Any]:  # type: ignore[valid-type]
        taken.append(beat.model_dump())  # type: ignore[attr-defined]
        return HeartbeatReply().model_dump(mode="json")

    return TestClient(app), taken


def test_an_older_controller_gets_the_beat_without_the_field() -> None:
    http, taken = older_controller()
    refused = http.post("/v1/agents/heartbeat", json={"node": "n", "load": LOAD.model_dump()})
    assert refused.status_code == 422  # what the agent sent before the fix: every beat
    calls: list[int] = []
    reader = lambda: calls.append(1) or LOAD  # noqa: E731
    client = agent(http, reader)
    client._beat(full=True)  # refused for the field, sent again without it
    client._beat(full=True)  # without it at once
    assert [b["node"] for b in taken] == ["node-l", "node-l"]
    assert len(calls) == 1  # (read no more once refused)
    client._reregister()  # (the controller restarted: maybe a newer one) it is tried again
    client._beat(full=True)
    assert len(taken) == 3 and len(calls) == 2


def test_another_refusal_is_not_taken_for_the_field() -> None:
    def answer(request: httpx.Request) -> httpx.Response:
        detail = [{"type": "extra_forbidden", "loc": ["body", "ready"], "msg": "Extra inputs"}]
        return httpx.Response(422, json={"detail": detail})

    client = agent(httpx.Client(transport=httpx.MockTransport(answer)))
    with pytest.raises(httpx.HTTPStatusError):
        client._beat(full=True)
    assert client.load.refused is False
