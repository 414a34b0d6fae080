"""A batch job over two nodes (``sbatch -N 2``) runs its script on its first node and only
holds slots on the second. When the second node's agent is stopped (SIGTERM to a real
``fusesched agent`` process: it tells the controller it is leaving) the job is ended as
Slurm's NODE_FAIL ends it, although none of its tasks ran there: with ``--no-requeue`` it
fails naming the node, otherwise it goes back to the queue; within a few seconds, not after
the node timeout (controller/failures.py, docs/FAILURES.md).

The controller and node-a (where the scripts run) are a :func:`local_cluster`; node-b is a
separate agent process, so that it can be stopped as ``systemctl stop`` stops it."""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from fusesched.agent.config import AgentConfig
from fusesched.cli.local import LocalCluster
from fusesched.sdk import Client

from .conftest import agent_configs, local_cluster
from .failure_cluster import process_gone, until


class NodeB:
    """node-b's agent as its own process (started in :meth:`start`, SIGTERM in :meth:`stop`)."""

    def __init__(self, url: str, root: Path) -> None:
        self.shared = Path(tempfile.mkdtemp(prefix="fusesched-node-b-"))
        self.shared.chmod(0o755)  # its work dir must be reachable by the tasks' uids
        (config,) = [c for c in agent_configs(self.shared) if c.name == "node-b"]
        self.config = root / "node-b.yaml"
        self.config.write_text(json.dumps(config.model_dump(mode="json")))  # (JSON is YAML)
        self.log = root / "node-b.log"
        self.url = url
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        argv = [sys.executable, "-m", "fusesched", "agent", "--controller", self.url]
        with self.log.open("ab") as out:
            self.proc = subprocess.Popen(
                [*argv, "--config", str(self.config)],
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
            )

    def stop(self) -> int:
        """SIGTERM, as ``systemctl stop fusesched-agent`` sends: the agent's exit status."""
        assert self.proc is not None
        self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(timeout=15)

    def output(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""

    def close(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        shutil.rmtree(self.shared, ignore_errors=True)


def a_and_c(configs: list[AgentConfig]) -> list[AgentConfig]:
    """node-a, and node-c in the CPU pool: where the requeued job may run again."""
    cpu = {"fusesched.io/pool": "cpu"}
    return [configs[0], configs[2].model_copy(update={"labels": cpu, "fake_devices": []})]


@pytest.fixture
def site(tmp_path: Path) -> Iterator[tuple[LocalCluster, NodeB]]:
    with local_cluster(tmp_path / "data", a_and_c) as cluster:
        node_b = NodeB(cluster.url, tmp_path)
        try:
            yield cluster, node_b
        finally:
            node_b.close()


def node(client: Client, name: str) -> dict[str, object]:
    """Node ``name`` as ``fusesched nodes`` shows it (empty: not registered yet)."""
    found = [n for n in client.nodes() if n["name"] == name]
    return dict(found[0]) if found else {}


def script(scratch: Path, name: str, options: str) -> dict[str, str]:
    """A batch script with ``options`` that says where it runs and its pid, then sleeps."""
    said = scratch / name
    text = (
        f"#!/bin/bash\n#SBATCH --mem=64M -t 5 {options}\n"
        f'echo "$SLURMD_NODENAME $$" > {said}.tmp && mv {said}.tmp {said}\n'
        "exec sleep 600\n"
    )
    return {"name": f"{name}.sh", "text": text}


def started(scratch: Path, name: str) -> tuple[str, int]:
    """Where script ``name`` runs and its pid, once it has said so."""
    until(lambda: (scratch / name).exists(), 30, f"script {name} did not start")
    where, pid = (scratch / name).read_text().split()
    return where, int(pid)


def test_stopping_the_second_node_s_agent_ends_every_batch_job_allocated_it(
    site: tuple[LocalCluster, NodeB], scratch: Path
) -> None:
    cluster, node_b = site
    client = Client(cluster.url)
    node_b.start()
    until(lambda: node(client, "node-b").get("state") == "up", 30, node_b.output)
    # node-c is kept full, so that both jobs get node-a and node-b (the requeued one, off
    # node-b, still fits the cluster: a job no node is left for is rejected, not requeued)
    client.submit_files([script(scratch, "blocker", "-w node-c -c 4")])
    assert started(scratch, "blocker")[0] == "node-c"
    two_nodes = "-N 2 -n 2 -c 1"
    scripts = [
        script(scratch, "once", f"{two_nodes} --no-requeue"),
        script(scratch, "again", two_nodes),
    ]
    once, again = client.submit_files(scripts)["ids"]
    pids = []
    for job, name in ((once, "once"), (again, "again")):
        where, pid = started(scratch, name)
        assert where == "node-a"  # the script runs on the first node; node-b only holds slots
        shown = client.show(job)
        assert (shown["state"], sorted(shown["nodes"])) == ("Running", ["node-a", "node-b"])
        pids.append(pid)

    stopped = time.monotonic()
    assert node_b.stop() == 0, node_b.output()  # it told the controller it is leaving
    until(lambda: client.show(once)["state"] == "Failed", 10, lambda: str(client.show(once)))
    until(lambda: client.show(again)["state"] == "Pending", 10, lambda: str(client.show(again)))
    ended_s = time.monotonic() - stopped
    print(f"both jobs ended {ended_s:.2f} s after the SIGTERM")
    assert ended_s < 5.0, f"{ended_s:.2f} s (the node timeout is far longer)"
    until(lambda: all(process_gone(pid) for pid in pids), 10, "a script still runs")

    failed = client.show(once)
    assert (
        failed["reason"] == "NodeDown: node node-b's agent stopped; not requeued (--no-requeue)"
    ), failed
    down = node(client, "node-b")
    assert (down["state"], down["reason"]) == ("down", "agent stopped")
    queued = client.show(again)
    assert queued["phase"] == "queued", queued
    assert queued["reason"].startswith("requeued (node node-b's agent stopped: requeued)"), queued
    rows = cluster.server.persist.store.events_for_job(again)
    said = [(r.event.kind, r.event.data.get("reason")) for r in rows]
    assert ("JobNode", "node node-b's agent stopped: requeued") in said, said
