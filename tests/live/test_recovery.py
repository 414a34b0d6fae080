"""Crash safety: the controller is SIGKILLed and restarted; agents keep their tasks running
and the new controller adopts them — no job is lost, none runs twice."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from fusesched.cli.local import AgentHandle, start_agent
from fusesched.sdk import Client, ControllerError

from .conftest import agent_configs

FUSESCHED = str(Path(sys.executable).with_name("fusesched"))


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class Crashable:
    """A controller in its own process (so it can be SIGKILLed) and in-process agents."""

    def __init__(self, data: Path, agents_root: Path) -> None:
        self.data = data
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.proc: subprocess.Popen[bytes] | None = None
        self.agent_root = agents_root
        self.agents: list[AgentHandle] = []
        self.client = Client(self.url)

    def start_controller(self) -> None:
        self.proc = subprocess.Popen(
            [
                FUSESCHED,
                "controller",
                "--data-dir",
                str(self.data),
                "--port",
                str(self.port),
                "--no-auth",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 30
        while True:
            try:
                self.client.health()
                return
            except (ControllerError, OSError):
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)

    def kill_controller(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait()

    def start_agents(self) -> None:
        for cfg in agent_configs(self.agent_root)[:2]:
            self.agents.append(start_agent(self.url, cfg, long_poll_s=0.5))

    def stop(self) -> None:
        for agent in self.agents:
            agent.stop()
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(timeout=10)


@pytest.fixture
def crashable(tmp_path: Path, scratch: Path) -> Iterator[Crashable]:
    root = scratch / "agents"
    root.mkdir(mode=0o755)
    cluster = Crashable(tmp_path / "data", root)
    cluster.start_controller()
    cluster.start_agents()
    try:
        yield cluster
    finally:
        cluster.stop()


def counter(scratch: Path, name: str, seconds: float, **extra: Any) -> dict[str, Any]:
    """A job that records its pid and counts for ``seconds``."""
    marks = scratch / f"{name}.pids"
    script = (
        f"echo $$ >> {marks}; i=0; end=$(( $(date +%s) + {int(seconds)} )); "
        'while [ "$(date +%s)" -lt "$end" ]; do i=$((i+1)); sleep 0.1; done; echo counted $i'
    )
    group = {"argv": ["sh", "-c", script], "resources": {"cpu": "1", "memory": "32Mi"}}
    group.update(extra.pop("group", {}))
    return {"name": name, "walltime_s": 300, "groups": [group], **extra}


def wait_for(what: str, check: Any, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            if check():
                return
        except (ControllerError, OSError):
            pass
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


def test_running_jobs_survive_a_controller_crash(crashable: Crashable, scratch: Path) -> None:
    client = crashable.client
    single = client.submit(counter(scratch, "single", 6))
    gang = client.submit(counter(scratch, "gang", 6, group={"replicas": 2}))
    wait_for(
        "both to run", lambda: all(client.show(j)["state"] == "Running" for j in (single, gang))
    )
    # fill the cluster so that one job waits in the queue through the crash
    waiting = client.submit(counter(scratch, "waiting", 1, group={"resources": {"cpu": "2"}}))
    time.sleep(0.5)
    before = {j: client.show(j) for j in (single, gang, waiting)}
    assert before[waiting]["state"] == "Pending"

    crashable.kill_controller()
    time.sleep(1.0)  # the agents keep their tasks running meanwhile
    crashable.start_controller()

    done = {j: client.wait(j, timeout=60) for j in (single, gang, waiting)}
    for view in done.values():
        assert view["state"] == "Completed", view
    # the running jobs were adopted, not restarted: the same tasks, each started once
    for job_id in (single, gang):
        tasks = [t["task_id"] for t in done[job_id]["tasks"]]
        assert tasks == [t["task_id"] for t in before[job_id]["tasks"]], tasks
        assert all("-r" not in t for t in tasks)
    assert len((scratch / "single.pids").read_text().split()) == 1
    assert len((scratch / "gang.pids").read_text().split()) == 2
    assert "counted" in client.logs(single)


def test_a_job_that_ended_during_the_outage_is_settled(crashable: Crashable, scratch: Path) -> None:
    client = crashable.client
    short = client.submit(counter(scratch, "short", 2))
    wait_for("it to run", lambda: client.show(short)["state"] == "Running")
    crashable.kill_controller()
    time.sleep(3.0)  # it ends while no controller listens; its agent keeps the report
    crashable.start_controller()
    view = client.wait(short, timeout=30)
    assert view["state"] == "Completed", view
    assert view["exit_code"] == 0


def submit_retrying(client: Client, request: dict[str, Any]) -> str:
    """Submit as a client under a restarting controller does: again while it is not ready
    (no node back yet: 503) or not listening."""
    deadline = time.monotonic() + 30
    while True:
        try:
            return client.submit(request)
        except (ControllerError, OSError) as exc:
            if getattr(exc, "status", 503) != 503 or time.monotonic() > deadline:
                raise
            time.sleep(0.1)


def test_repeated_crashes_lose_nothing(crashable: Crashable, scratch: Path) -> None:
    client = crashable.client
    submitted: list[str] = []
    for round_ in range(3):
        submitted += [
            submit_retrying(client, counter(scratch, f"r{round_}-{k}", 2)) for k in range(3)
        ]
        time.sleep(0.7)
        crashable.kill_controller()
        crashable.start_controller()
    views = {j: client.wait(j, timeout=90) for j in submitted}
    states = {j: v["state"] for j, v in views.items()}
    assert set(states.values()) == {"Completed"}, states
    for j in submitted:  # each ran exactly once: one pid recorded per job
        name = views[j]["name"]
        assert len((scratch / f"{name}.pids").read_text().split()) == 1, name
    assert os.path.exists(crashable.data)
