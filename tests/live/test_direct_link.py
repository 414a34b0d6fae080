"""Local agents that call their controller in the same process (``agent_link="direct"``, what
``fusesched up`` uses) instead of over HTTP: jobs run, exit codes and logs come back, a node
the controller forgot registers again, a controller that stepped down refuses, and ``fusesched
up`` itself runs a job this way."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from fusesched.agent.link import LinkError, NodeForgotten
from fusesched.api.wire import Heartbeat, HeartbeatReply, NodeInventory
from fusesched.cli.local import DirectLink, LocalCluster
from fusesched.controller.records import UnknownNodeError
from fusesched.sdk import Client

from .conftest import local_cluster


def until(check: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(what)
        time.sleep(0.05)


@pytest.fixture
def direct_cluster(tmp_path: Path) -> Iterator[LocalCluster]:
    with local_cluster(
        tmp_path / "data", lambda configs: configs[:1], agent_link="direct"
    ) as cluster:
        yield cluster


def job(command: list[str], name: str) -> dict[str, Any]:
    return {
        "name": name,
        "groups": [{"argv": command, "resources": {"cpu": 1, "memory": "100Mi"}}],
    }


def test_jobs_run_and_report_through_the_direct_link(direct_cluster: LocalCluster) -> None:
    client = Client(direct_cluster.url)
    ok = client.submit(job(["sh", "-c", "echo hello-direct"], "ok"))
    bad = client.submit(job(["sh", "-c", "exit 7"], "bad"))
    assert client.wait(ok, timeout=30)["state"] == "Completed"
    failed = client.wait(bad, timeout=30)
    assert failed["state"] == "Failed"
    assert failed["exit_code"] == 7
    until(lambda: "hello-direct" in client.logs(ok), 10, "the log never arrived")
    # the agent's node is known by its name, as over HTTP
    assert [n["name"] for n in client.nodes()] == ["node-a"]


def test_a_forgotten_node_registers_again(direct_cluster: LocalCluster) -> None:
    controller = direct_cluster.server.controller
    with controller.work:
        controller.nodes.pop("node-a")
    # the next beat is refused as unknown; the agent registers again and takes work
    until(lambda: "node-a" in controller.nodes, 10, "the node never registered again")
    client = Client(direct_cluster.url)
    job_id = client.submit(job(["true"], "after"))
    assert client.wait(job_id, timeout=30)["state"] == "Completed"


def test_link_errors_are_the_clients_kind() -> None:
    def refuse(*_: object) -> None:
        raise UnknownNodeError("ghost")

    def crash(*_: object) -> None:
        raise RuntimeError("boom")

    beat = Heartbeat(node="ghost")
    server: Any = SimpleNamespace(
        fenced=None, controller=SimpleNamespace(heartbeat=refuse, stopped=threading.Event())
    )
    with pytest.raises(NodeForgotten, match="ghost"):
        DirectLink(server).heartbeat(beat, 0.0, False)
    server.controller.heartbeat = crash
    with pytest.raises(LinkError, match="boom"):
        DirectLink(server).heartbeat(beat, 0.0, False)
    server.fenced = "lost the lease"
    with pytest.raises(LinkError, match="stepped down"):
        DirectLink(server).heartbeat(beat, 0.0, False)
    server.fenced = None

    def step_down(*_: object) -> HeartbeatReply:
        server.fenced = "lost the lease during the long poll"
        return HeartbeatReply()

    server.controller.heartbeat = step_down  # its reply, given after it stepped down, is dropped
    with pytest.raises(LinkError, match="during the long poll"):
        DirectLink(server).heartbeat(beat, 0.0, False)
    server.fenced = None
    server.controller.stopped.set()  # a stopped controller answers no beat: the agent backs off
    with pytest.raises(LinkError, match="has stopped"):
        DirectLink(server).heartbeat(beat, 0.0, False)


def test_an_invalid_inventory_is_the_callers_error() -> None:
    def refuse(_: object) -> None:
        raise ValueError("bad node name")

    server: Any = SimpleNamespace(
        fenced=None, controller=SimpleNamespace(register=refuse, stopped=threading.Event())
    )
    with pytest.raises(ValueError, match="bad node name"):
        DirectLink(server).register(NodeInventory(name="n", resources={"cpu": "1"}))


def test_unknown_link_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="unknown agent link"):
        LocalCluster(tmp_path, port=0, agent_link="pigeon")  # type: ignore[arg-type]
    done = subprocess.run(
        [sys.executable, "-m", "fusesched", "up", "--agent-link", "pigeon"],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
    )
    assert done.returncode == 2
    assert "unknown --agent-link 'pigeon'" in done.stderr
    assert "Traceback" not in done.stderr
    assert not (tmp_path / "fusesched-data").exists()


UP = [sys.executable, "-m", "fusesched", "up"]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_fusesched_up_runs_a_job_with_its_default_link(tmp_path: Path) -> None:
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    data = Path(tempfile.mkdtemp(prefix="fusesched-up-"))
    data.chmod(0o755)
    up = subprocess.Popen(
        [*UP, "--data-dir", str(data / "d"), "--port", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        client = Client(url)

        def ready() -> bool:
            assert up.poll() is None, up.stderr.read() if up.stderr else "exited"
            try:
                return any(n["state"] == "up" for n in client.nodes())
            except Exception:
                return False

        until(ready, 60, "fusesched up never came up")
        spec = tmp_path / "job.yaml"
        spec.write_text("name: from-up\nresources: {cpu: 1}\ncommand: [sh, -c, 'exit 3']\n")
        env = dict(os.environ, FUSESCHED_CONTROLLER=url)
        done = subprocess.run(
            [sys.executable, "-m", "fusesched", "submit", str(spec), "--json"],
            capture_output=True,
            text=True,
            env=env,
            timeout=60,
        )
        assert done.returncode == 0, done.stderr
        shown = client.wait(json.loads(done.stdout)["id"], timeout=30)
        assert (shown["state"], shown["exit_code"]) == ("Failed", 3)
    finally:
        up.send_signal(signal.SIGINT)
        try:
            assert up.wait(timeout=30) == 0
        finally:
            if up.poll() is None:
                os.killpg(up.pid, signal.SIGKILL)
            shutil.rmtree(data, ignore_errors=True)
