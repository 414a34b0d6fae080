"""An agent stopped with SIGTERM tells the controller its node is leaving before it kills its
tasks: the controller (authentication on, node timeout 30 s) takes the node down at once with
the reason "agent stopped" and requeues its job, which runs on the other agent within about
two seconds, not after the node timeout; the agent started again brings the node back up.

Agent A is a real ``fusesched agent`` process (its SIGTERM is what ``systemctl stop`` sends),
with its node credential in its work dir; agent B and the controller run in the test."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy import select

from fusesched.agent.config import AgentConfig
from fusesched.agent.joining import CREDENTIAL_FILE
from fusesched.cli.local import AgentHandle, start_agent
from fusesched.controller.server import ControllerServer
from fusesched.sdk import Client
from fusesched.store.schema import events

from .failure_cluster import process_gone, until

NODE_TIMEOUT_S = 30.0  # far longer than the test: only the agent's word can bring the node down


class Site:
    """The controller, agent A's process (started and stopped at will) and agent B."""

    def __init__(self, root: Path, shared: Path) -> None:
        self.root = root
        self.shared = shared
        self.server = ControllerServer(
            root / "data", port=0, auth=True, long_poll_s=0.5, node_timeout_s=NODE_TIMEOUT_S
        )
        self.server.start()
        assert self.server.admin_token_path is not None
        self.admin = self.server.admin_token_path.read_text().strip()
        self.client = Client(self.server.url, token=self.admin)
        self.proc: subprocess.Popen[bytes] | None = None
        self.b: AgentHandle | None = None
        self.log = root / "agent-a.log"
        self.a_config = self._config_file("node-a")

    def config(self, name: str) -> AgentConfig:
        return AgentConfig(
            name=name,
            address="127.0.0.1",
            cpu=2,
            memory="1Gi",
            work_dir=self.shared / name,
            image_cache_dir=self.shared / "images",
            nvml=False,
            sample_interval_s=0,
        )

    def _config_file(self, name: str) -> Path:
        """Agent ``name``'s config file, and its node credential in its work dir (as a join
        leaves it there)."""
        cfg = self.config(name)
        cfg.work_dir.mkdir(parents=True)
        credential = cfg.work_dir / CREDENTIAL_FILE
        credential.write_text(self.server.authenticator.issue_agent(name) + "\n")
        credential.chmod(0o600)
        path = self.root / f"{name}.yaml"
        path.write_text(json.dumps(cfg.model_dump(mode="json")))  # (JSON is YAML)
        return path

    def start_a(self) -> None:
        argv = [sys.executable, "-m", "fusesched", "agent", "--controller", self.server.url]
        with self.log.open("ab") as out:
            self.proc = subprocess.Popen(
                [*argv, "--config", str(self.a_config)],
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
            )

    def start_b(self) -> None:
        token = self.server.authenticator.issue_agent("node-b")
        self.b = start_agent(self.server.url, self.config("node-b"), long_poll_s=0.5, token=token)

    def state(self, name: str) -> str | None:
        """Node ``name``'s state (None: not registered)."""
        found = [n["state"] for n in self.client.nodes() if n["name"] == name]
        return str(found[0]) if found else None

    def portal_node(self, name: str) -> dict[str, Any]:
        """The node as the portal's cluster page shows it (with why it is not up)."""
        headers = {"authorization": f"Bearer {self.admin}"}
        answer = httpx.get(f"{self.server.url}/v1/portal/cluster", headers=headers)
        answer.raise_for_status()
        (found,) = [n for n in answer.json()["nodes"] if n["name"] == name]
        return dict(found)

    def audited(self, action: str) -> list[dict[str, Any]]:
        store = self.server.persist.store
        with store._read() as conn:
            rows = conn.execute(select(events).where(events.c.kind == "Audit")).mappings().all()
        return [{"node": r["node"], **r["data"]} for r in rows if r["data"]["action"] == action]

    def output(self) -> str:
        return self.log.read_text(errors="replace")

    def close(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        if self.b is not None:
            self.b.stop(leave=False)
        self.server.stop()


@pytest.fixture
def site(tmp_path: Path) -> Iterator[Site]:
    shared = Path(tempfile.mkdtemp(prefix="fusesched-leaving-"))
    shared.chmod(0o755)  # the agents' work dirs must be reachable by the tasks' uids
    made = Site(tmp_path, shared)
    try:
        yield made
    finally:
        made.close()
        shutil.rmtree(shared, ignore_errors=True)


def test_a_stopped_agent_has_its_job_requeued_at_once_and_its_node_back_when_it_returns(
    site: Site, scratch: Path
) -> None:
    site.start_a()
    until(lambda: site.state("node-a") == "up", 30, site.output)
    pid_file = scratch / "pid-node-a"
    wrap = f'echo $$ > {scratch}/pid-"$FUSESCHED_NODE"; exec sleep 600'
    group = {"resources": {"cpu": "1", "memory": "64Mi"}, "argv": ["sh", "-c", wrap]}
    job = site.client.submit({"groups": [group], "restart": {"backoff_s": 0}})
    until(lambda: pid_file.exists() and pid_file.read_text().strip(), 30, site.output)
    task = int(pid_file.read_text())
    assert site.client.show(job)["nodes"] == ["node-a"]
    site.start_b()
    until(lambda: site.state("node-b") == "up", 30, "node-b did not come up")

    assert site.proc is not None
    stopped = time.monotonic()
    site.proc.send_signal(signal.SIGTERM)  # systemctl stop fusesched-agent
    until(lambda: site.client.show(job)["nodes"] == ["node-b"], 10, site.output)
    moved_s = time.monotonic() - stopped
    assert site.client.show(job)["state"] == "Running"
    assert site.state("node-a") == "down"
    assert site.portal_node("node-a")["reason"] == "agent stopped"
    (shown,) = [n for n in site.client.nodes() if n["name"] == "node-a"]
    assert shown["reason"] == "agent stopped"  # (sinfo -R shows it)
    assert site.proc.wait(timeout=15) == 0, site.output()
    assert process_gone(task)  # the agent killed it on its way out
    assert (scratch / "pid-node-b").exists()  # the new run
    print(f"requeued and running on node-b {moved_s:.2f} s after the SIGTERM")
    assert moved_s < 3.0, f"{moved_s:.2f} s (node timeout {NODE_TIMEOUT_S:g} s)"
    rows = site.server.persist.store.events_for_job(job)
    said = [(r.event.kind, r.event.data.get("reason")) for r in rows]
    assert ("JobNode", "node node-a's agent stopped: requeued") in said, said
    [leaving] = site.audited("node-leaving")
    assert (leaving["node"], leaving["role"]) == ("node-a", "agent")  # its own credential

    site.start_a()  # the agent starts again: the node is up, with nothing of the old run
    until(lambda: site.state("node-a") == "up", 30, site.output)
    assert site.client.show(job)["nodes"] == ["node-b"]
    os.kill(int((scratch / "pid-node-b").read_text()), 0)  # still running there
