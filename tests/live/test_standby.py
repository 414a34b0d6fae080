"""Leader and standby on PostgreSQL: one controller leads (an advisory lock), a second stands by
and takes over when the leader is SIGKILLed; the agent and the SDK follow it.

Skipped when PostgreSQL is not running at 127.0.0.1:5432 (``fresh_postgres_url``).
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest

from fusesched.agent.config import AgentConfig
from fusesched.cli.local import AgentHandle, start_agent
from fusesched.controller.leader import Elector, StandbyUnsupported
from fusesched.controller.server import ControllerServer
from fusesched.sdk import Client, ControllerError

from .conftest import drop_postgres, fresh_postgres_url

NODE = "node-s"
FUSESCHED = [sys.executable, "-m", "fusesched"]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def job(argv: list[str], cpu: str) -> dict[str, Any]:
    return {
        "name": "standby-test",
        "walltime_s": 600,
        "groups": [{"resources": {"cpu": cpu, "memory": "64Mi"}, "argv": argv}],
    }


def health(url: str) -> int:
    """The status of ``GET /healthz`` (0: nothing listens)."""
    try:
        return httpx.get(f"{url}/healthz", timeout=2.0).status_code
    except httpx.TransportError:
        return 0


def wait_for(predicate: Any, timeout: float, what: str, step: float = 0.02) -> float:
    """Poll ``predicate`` until true; returns the time it took."""
    start = time.monotonic()
    while not predicate():
        if time.monotonic() - start > timeout:
            raise AssertionError(f"{what}: not after {timeout} s")
        time.sleep(step)
    return time.monotonic() - start


def pg_session(url: str) -> psycopg.Connection[Any]:
    dbname = url.rsplit("/", 1)[1]
    return psycopg.connect(f"host=127.0.0.1 user=postgres dbname={dbname}", autocommit=True)


@pytest.fixture
def pg_url() -> Iterator[str]:
    url = fresh_postgres_url()
    try:
        yield url
    finally:
        drop_postgres(url)


# ---------------------------------------------------------------------- the elector


def test_one_elector_leads_and_the_other_takes_over(pg_url: str) -> None:
    lost: list[str] = []
    first = Elector(pg_url, name="first", on_lost=lost.append)
    second = Elector(pg_url, name="second")
    third = Elector(pg_url, name="third")
    try:
        assert first.acquire(block=False)
        assert first.is_leader
        assert not second.acquire(block=False)
        assert not second.acquire(block=True, timeout=0.5)  # still held
        assert "first" in second.holder()

        first.release()  # a clean hand-over
        assert not first.is_leader
        assert second.acquire(block=True, timeout=5)
        assert not third.acquire(block=False)

        # the leader's connection dies (as when its process is killed): the lock is free at
        # once, and the old leader notices and fences itself
        lost_second: list[str] = []
        second.on_lost = lost_second.append
        with pg_session(pg_url) as conn:
            conn.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                "WHERE application_name = 'second'"
            )
        assert third.acquire(block=True, timeout=5)
        wait_for(lambda: bool(lost_second), 5, "the old leader fences")
        assert not second.is_leader
        assert "connection" in lost_second[0]
        assert not lost  # a clean release is not a loss
    finally:
        for elector in (first, second, third):
            elector.release()


def test_electors_of_other_schemas_do_not_compete(pg_url: str) -> None:
    with pg_session(pg_url) as conn:
        conn.execute("CREATE SCHEMA other")
    here = Elector(pg_url, name="here")
    there = Elector(pg_url + "?options=-csearch_path%3Dother", name="there")
    try:
        assert here.acquire(block=False)
        assert there.acquire(block=False)
        assert here.key != there.key
    finally:
        here.release()
        there.release()


def test_a_standby_needs_postgresql(tmp_path: Path) -> None:
    with pytest.raises(StandbyUnsupported, match="PostgreSQL"):
        Elector(f"sqlite:///{tmp_path}/x.db")
    with pytest.raises(StandbyUnsupported, match="PostgreSQL"):
        ControllerServer(tmp_path, port=0, standby=True)
    result = subprocess.run(
        [*FUSESCHED, "controller", "--standby", "--no-auth", "--data-dir", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2
    assert "PostgreSQL" in result.stderr


def test_a_leader_that_loses_its_database_session_steps_down(pg_url: str, tmp_path: Path) -> None:
    """Fencing, in process: the lock's session is killed; the controller stops serving and
    scheduling instead of going on as a second leader."""
    server = ControllerServer(tmp_path, port=0, database_url=pg_url, standby=True)
    standby = ControllerServer(tmp_path / "b", port=0, database_url=pg_url, standby=True)
    waiting = threading.Thread(target=standby.start, daemon=True)
    try:
        server.start()
        assert health(server.url) == 200
        waiting.start()
        wait_for(lambda: health(standby.url) == 503, 10, "the standby answers 503")
        reply = httpx.get(f"{standby.url}/v1/jobs", timeout=5)
        assert reply.status_code == 503
        assert reply.json() == {"detail": "standby"}

        with pg_session(pg_url) as conn:
            conn.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                f"WHERE application_name = 'fusesched-controller {server.url}'"
            )
        wait_for(lambda: server.fenced is not None, 5, "the leader steps down")
        wait_for(lambda: health(server.url) != 200, 5, "the old leader stops answering")
        wait_for(lambda: health(standby.url) == 200, 10, "the standby leads")
    finally:
        server.stop()
        standby.stop()
        waiting.join(timeout=10)


# ---------------------------------------------------------------------- two processes


class Controllers:
    """Two ``fusesched controller --standby`` processes on one PostgreSQL database."""

    def __init__(self, pg_url: str, root: Path) -> None:
        self.pg_url = pg_url
        self.root = root
        self.urls = [f"http://127.0.0.1:{free_port()}" for _ in range(2)]
        self.procs: dict[str, subprocess.Popen[bytes]] = {}

    def start(self, url: str) -> None:
        port = url.rsplit(":", 1)[1]
        log = open(self.root / f"controller-{port}.log", "ab")  # noqa: SIM115 (the process keeps it)
        args = ["controller", "--standby", "--no-auth", "--db", self.pg_url, "--port", port]
        self.procs[url] = subprocess.Popen(
            [*FUSESCHED, *args, "--data-dir", str(self.root / port)],
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        log.close()
        wait_for(lambda: health(url) in (200, 503), 60, f"controller {url} answers", step=0.1)

    def kill(self, url: str) -> None:
        proc = self.procs.pop(url)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)

    def stop(self) -> None:
        for proc in self.procs.values():
            proc.terminate()
        for proc in self.procs.values():
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()
        self.procs = {}


def node_registered(url: str) -> bool:
    try:
        nodes = httpx.get(f"{url}/v1/nodes", timeout=2.0)
    except httpx.TransportError:
        return False
    return nodes.status_code == 200 and any(n["name"] == NODE for n in nodes.json())


def test_the_standby_takes_over_when_the_leader_is_killed(
    pg_url: str, tmp_path: Path, scratch: Path
) -> None:
    """Three take-overs (A→B→A→B), each after a SIGKILL of the leader: the standby serves the
    API within seconds, the agent re-registers with it, the SDK follows it, the job that was
    running is adopted, and jobs that were pending at the kill run to completion."""
    ctl = Controllers(pg_url, tmp_path)
    agent: AgentHandle | None = None
    a, b = ctl.urls
    timings: list[tuple[float, float]] = []
    try:
        ctl.start(a)
        wait_for(lambda: health(a) == 200, 30, "the first controller leads")
        ctl.start(b)
        assert health(b) == 503  # standing by
        config = AgentConfig(
            name=NODE,
            address="127.0.0.1",
            work_dir=scratch / "agent",
            image_cache_dir=scratch / "images",
            nvml=False,
            cpu=3,
            memory="2Gi",
        )
        agent = start_agent(f"{a},{b}", config, long_poll_s=0.5)
        client = Client([a, b], failover_s=30)
        wait_for(lambda: node_registered(a), 10, "the agent registers")

        leader, standby = a, b
        for _ in range(3):
            # a job holding two of the three CPUs, and two that wait behind it
            hog = client.submit(job(["sleep", "600"], cpu="2"))
            wait_for(lambda h=hog: client.show(h)["state"] == "Running", 30, "the hog runs")
            waiting = [client.submit(job(["sh", "-c", "echo ran"], cpu="2")) for _ in range(2)]
            time.sleep(0.3)
            assert {client.show(j)["state"] for j in waiting} == {"Pending"}

            ctl.kill(leader)
            killed = time.monotonic()
            wait_for(lambda s=standby: health(s) == 200, 30, "the standby serves the API")
            api_s = time.monotonic() - killed
            wait_for(lambda s=standby: node_registered(s), 30, "the agent re-registers")
            agent_s = time.monotonic() - killed
            timings.append((api_s, agent_s))

            # nothing submitted before the kill is lost; the running job is adopted by the
            # new leader (the same task, not restarted): cancel it so the waiting jobs run
            hog_tasks = [t["task_id"] for t in client.show(hog)["tasks"]]
            assert client.url == standby  # the SDK follows the new leader
            wait_for(lambda h=hog: client.show(h)["state"] == "Running", 30, "the hog adopted")
            assert [t["task_id"] for t in client.show(hog)["tasks"]] == hog_tasks
            with contextlib.suppress(ControllerError):
                client.cancel(hog)
            assert client.wait(hog, timeout=30)["state"] == "Cancelled"
            for job_id in waiting:
                assert client.wait(job_id, timeout=60)["state"] == "Completed"
                assert "ran" in client.logs(job_id)

            ctl.start(leader)  # the old leader comes back as the standby
            assert health(leader) == 503
            leader, standby = standby, leader
    finally:
        if agent is not None:
            agent.stop()
        ctl.stop()
    api = statistics.median(t[0] for t in timings)
    agent_median = statistics.median(t[1] for t in timings)
    report = ", ".join(f"{x:.2f}/{y:.2f}" for x, y in timings)
    print(
        f"\ntake-over (API / agent registered), s: {report}; medians {api:.2f}/{agent_median:.2f}"
    )
    assert api < 10
    assert agent_median < 15
